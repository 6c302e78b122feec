#!/usr/bin/env python3
"""W5: the per-shard engine alone, one thread, no HTTP — Shoal vs Lucene 8.8
vs Xapian 1.4 on the same W3 corpus (which carries the W2 fields), the same
query file (gen_queries.py), one segment each.

Usage: w5.py [N] [--repeat R] [--trials T] [--seed S] [--qseed Q] [--engines shoal,lucene,xapian]
             [--build DIR] [--no-doc]
Each engine first runs an untimed validation pass (exact counts against the
file's brute-force "expect"), then R timed rounds per class; T trials
alternate the engine order; the table shows per-class medians and the ratios
Shoal/Lucene and Shoal/Xapian, and whether the exact counts agree.
Corpora and indexes are cached in $BENCH_CACHE (default /tmp/shoal-bench).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CACHE = os.environ.get("BENCH_CACHE", "/tmp/shoal-bench")
sys.path.insert(0, HERE)
from index_bench import corpus, lucene_classes, lucene_cp  # noqa: E402


def run(cmd, ok=(0,), **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode not in ok:
        raise RuntimeError("%s failed (%d): %s" % (cmd[0], p.returncode, (p.stderr or p.stdout)[-1500:]))
    return p


def parse_classes(text, engine):
    """Per-class JSON lines; for other formats, lines `CLASS ... qps=N`."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if "class" in o:
                o["engine"] = engine
                out.append(o)
            continue
        m = re.match(r"(\S+)\s.*?qps[=: ]+([0-9.]+)", line)
        if m:
            o = {"engine": engine, "class": m.group(1), "qps": float(m.group(2))}
            for k in ("p50", "p99"):
                mm = re.search(k + r"[_a-z]*[=: ]+([0-9.]+)", line)
                if mm:
                    o[k + "_us"] = float(mm.group(1))
            mm = re.search(r"(?:hits|count|counts)[=: ]+\[?([0-9, ]+)\]?", line)
            if mm:
                o["counts"] = [int(x) for x in re.findall(r"[0-9]+", mm.group(1))]
            out.append(o)
    return out


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=1000000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--qseed", type=int, default=7)
    ap.add_argument("--engines", default="shoal,lucene,xapian")
    ap.add_argument("--corpus", default="w3", choices=("w3", "w2"),
                    help="w3: text classes + facet cells; w2: facet cells on the W2 corpus")
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse a Shoal index left by index_bench.py --keep-w5 (same build)")
    a = ap.parse_args()
    engines = a.engines.split(",")
    docs = corpus(a.corpus, a.n, a.seed)
    qfile = os.path.join(CACHE, "q_%s_%d_s%d_q%d.ndjson" % (a.corpus, a.n, a.seed, a.qseed))
    if not os.path.exists(qfile):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_queries.py"), docs, qfile + ".tmp",
                        "--seed", str(a.qseed)], check=True)
        os.rename(qfile + ".tmp", qfile)
    mapping = os.path.join(HERE, "%s_mapping.json" % a.corpus)
    work = tempfile.mkdtemp(prefix="shoal-w5.", dir="/tmp")
    res = os.path.join(work, "results")
    os.makedirs(res)
    idx = {e: os.path.join(CACHE, "w5_%s_%s_%d_s%d" % (a.corpus, e, a.n, a.seed)) for e in engines}
    try:
        # ---- indexes (rebuilt for Shoal every run: its format may change between commits)
        if "shoal" in engines and not (a.reuse and os.path.exists(idx["shoal"] + ".done")):
            shutil.rmtree(idx["shoal"], ignore_errors=True)
            run([os.path.join(a.build, "bin", "shoal-engine"), "index", "--mapping", mapping, "--in", docs,
                 "--out", idx["shoal"], "--force-merge", "1", "--threads", "2", "--id-field", "id"])
        if "lucene" in engines and not os.path.exists(idx["lucene"] + ".done"):
            shutil.rmtree(idx["lucene"], ignore_errors=True)
            run(["java", "-Xms2g", "-Xmx2g", "-cp", lucene_classes(work) + ":" + lucene_cp(), "LuceneBench",
                 "index", docs, mapping, idx["lucene"], "--threads", "2"])
            open(idx["lucene"] + ".done", "w").close()
        if "xapian" in engines and not os.path.exists(idx["xapian"] + ".done"):
            shutil.rmtree(idx["xapian"], ignore_errors=True)
            run(["/usr/bin/python3", os.path.join(HERE, "xapian_bench.py"), "index", docs, idx["xapian"]])
            open(idx["xapian"] + ".done", "w").close()
        # ---- queries
        load0 = loadavg()
        print("w5: load average before the queries %s" % load0, flush=True)
        for trial in range(1, a.trials + 1):
            order = engines if trial % 2 else list(reversed(engines))
            for e in order:
                l0 = loadavg()
                if e == "shoal":
                    # exit 1: a count differs from "expect" (shown per class)
                    p = run([os.path.join(a.build, "bin", "shoal-engine"), "query", "--index", idx[e],
                             "--queries", qfile, "--repeat", str(a.repeat), "--mapping", mapping], ok=(0, 1))
                elif e == "lucene":
                    p = run(["java", "-Xms1g", "-Xmx1g", "-cp", lucene_classes(work) + ":" + lucene_cp(),
                             "LuceneBench", "query", idx[e], qfile, str(a.repeat)], ok=(0, 3))
                else:
                    p = run(["/usr/bin/python3", os.path.join(HERE, "xapian_bench.py"), "query", idx[e], qfile,
                             str(a.repeat)])
                rows = parse_classes(p.stdout, e)
                if not rows:
                    print("w5: no per-class lines from %s:\n%s\n%s" % (e, p.stdout[-1000:], p.stderr[-1000:]),
                          file=sys.stderr)
                with open(os.path.join(res, "%s_%d.json" % (e, trial)), "w") as f:
                    for r in rows:
                        f.write(json.dumps(r) + "\n")
                print("w5 trial %d %s: %d classes; load average before %s, after %s; %s" % (
                    trial, e, len(rows), l0, loadavg(),
                    p.stderr.strip().splitlines()[-1:] if p.stderr.strip() else ""), flush=True)
        table = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "w5", res],
                               capture_output=True, text=True, check=True).stdout
        machine = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "machine"],
                                 capture_output=True, text=True).stdout.strip()
        print(table)
        if not a.no_doc:
            nq = sum(1 for _ in open(qfile))
            text = ("Measured: %s. Command: `tests/bench/w5.sh %d --corpus %s --repeat %d --trials %d --seed %d "
                    "--qseed %d` (corpus `gen_%s.py %d --seed %d`, %d queries from `gen_queries.py --seed %d`). "
                    "One thread per engine, one segment per index, no query/result caches (Lucene's "
                    "query cache off). qps per class = runs / elapsed over %d rounds of the class's "
                    "queries after a warm-up; medians of %d trials, engines alternating (load average %s "
                    "before the queries). Lucene 8.8.1 in process "
                    "(`LuceneBench query`, StandardAnalyzer without stop words); Xapian 1.4.22 through its "
                    "Python bindings (which adds per-call overhead; wildcard/regexp expanded over the term "
                    "list per query because Xapian 1.4 has no such query; sloppy phrase as OP_NEAR, which "
                    "also matches reversed pairs, so its counts exceed Lucene's). TOP_k = top k by score "
                    "without exact totals (`track_total_hits: false`), COUNT = exact total only.\n\n%s"
                    % (machine, a.n, a.corpus, a.repeat, a.trials, a.seed, a.qseed, a.corpus, a.n, a.seed, nq, a.qseed,
                       a.repeat, a.trials, load0, table))
            subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "section",
                            "W5" if a.corpus == "w3" else "W5_W2"],
                           input=text, text=True, check=True)
            print("(written to docs/benchmarks.md, section %s)" % ("W5" if a.corpus == "w3" else "W5_W2"))
        print("results: %s" % res)
    finally:
        shutil.rmtree(os.path.join(work, "lucene-classes"), ignore_errors=True)


if __name__ == "__main__":
    main()
