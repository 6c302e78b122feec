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
        if tag.startswith("sphinx"):
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
def w5(d):
    res = {}
    counts = {}
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        eng = os.path.basename(f).split("_")[0]
        for x in load(f):
            if "class" not in x:
                continue
            res.setdefault((x["class"], eng), []).append(x.get("qps"))
            counts.setdefault(x["class"], {})[eng] = x.get("counts")
    classes = []
    for c, _ in res:
        if c not in classes:
            classes.append(c)
    rows = ["| class | Shoal qps | Lucene qps | Xapian qps | Shoal ÷ Lucene | Shoal ÷ Xapian | counts agree |",
            "|---|---|---|---|---|---|---|"]
    below = 0
    for c in classes:
        s, l, x = (med(res.get((c, e), [])) for e in ("shoal", "lucene", "xapian"))
        cc = counts.get(c, {})
        agree = "yes"
        if "shoal" in cc and "lucene" in cc and cc["shoal"] is not None and cc["shoal"] != cc["lucene"]:
            agree = "NO (shoal %s, lucene %s)" % (cc["shoal"], cc["lucene"])
        if "xapian" in cc and "lucene" in cc and cc["xapian"] != cc["lucene"]:
            agree += "; Xapian differs" + (" (OP_NEAR allows any order)" if c.startswith("sloppy") else "")
        if s is not None and l is not None and s < l:
            below += 1
        rows.append("| %s | %s | %s | %s | %s | %s | %s |" % (c, fmt(s), fmt(l), fmt(x), ratio(s, l), ratio(s, x), agree))
    rows.append("")
    rows.append("Classes where Shoal is below Lucene: %d of %d." % (below, len(classes)))
    # the targets (BENCHMARKS.md W5): every class >= 1.0x Lucene, geometric mean >= 1.5x, >= 3x Xapian
    def geo(eng):
        rs = [med(res[(c, "shoal")]) / med(res[(c, eng)]) for c in classes
              if med(res.get((c, "shoal"), [])) and med(res.get((c, eng), []))]
        return math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else None
    gl, gx = geo("lucene"), geo("xapian")
    if gl:
        rows.append("Targets: every class ≥ 1.0× Lucene: %s (%d below); geometric mean ≥ 1.5× Lucene: "
                    "%.2f× %s%s." % (verdict(below == 0), below, gl, verdict(gl >= 1.5),
                                     "; ≥ 3× Xapian (geometric mean): %.2f× %s" % (gx, verdict(gx >= 3))
                                     if gx else ""))
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
