#!/usr/bin/env python3
"""W5: the per-shard engine alone, one thread, no HTTP — Shoal vs Lucene 10 vs
tantivy (vs Lucene 8.8 and Xapian 1.4, secondary columns) on the same corpus
(W3 text carrying the W2 fields, the W2 corpus, or the short-document W3
corpus), the same query file (gen_queries.py), one segment each.

Usage: w5.py [N[,N2...]] [--corpus w3|w2|short] [--repeat R] [--trials T] [--seed S] [--qseed Q]
             [--engines shoal,lucene10,tantivy,lucene,xapian] [--build DIR] [--doc]
Engines: shoal (shoal-engine), lucene10 (tests/bench/peers/lucene10: the
newest Lucene 10 on Maven Central, Temurin 25), tantivy
(tests/bench/peers/tantivy: crates.io), lucene (Lucene 8.8, Debian's
liblucene8-java), xapian (Xapian 1.4, Python bindings).  The default is every
engine that can be built here; the peers are built on first use (Maven and
cargo download from Maven Central and crates.io; what is missing is
installed with apt-get when run as root).  A peer named in --engines that
cannot be built is an error.
Each engine first runs an untimed validation pass (exact counts against the
file's brute-force "expect"), then R timed rounds per class; T trials
alternate the engine order; the table shows per-class medians, the ratio of
Shoal to each peer, geometric means, and every count that differs from
Shoal's (or from "expect").  --corpus short with no N runs 126,236 (every
GCIDE entry) and then 926,000 documents.
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


# ------------------------------------------------------------------ peers
PEERS = os.path.join(HERE, "peers")
L10 = os.path.join(PEERS, "lucene10")
TAN = os.path.join(PEERS, "tantivy")
ENGINES = ("shoal", "lucene10", "tantivy", "lucene", "xapian")


def say(msg):
    print("w5: " + msg, flush=True)


def apt_install(pkgs):
    """apt-get install as root (what a peer's build needs); False when not root."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    say("installing %s with apt-get" % " ".join(pkgs))
    subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
    return subprocess.run(["apt-get", "install", "-y", "-qq"] + pkgs, capture_output=True).returncode == 0


def newest_mtime(paths):
    m = 0.0
    for p in paths:
        for root, _, files in os.walk(p) if os.path.isdir(p) else [(os.path.dirname(p), [], [os.path.basename(p)])]:
            for f in files:
                try:
                    m = max(m, os.path.getmtime(os.path.join(root, f)))
                except OSError:
                    pass
    return m


def java25():
    """A JDK >= 21 for Lucene 10: $LUCENE10_JAVA_HOME, else Temurin 25."""
    for h in (os.environ.get("LUCENE10_JAVA_HOME"), "/usr/lib/jvm/temurin-25-jdk-amd64"):
        if h and os.path.exists(os.path.join(h, "bin", "java")):
            return h
    return None


def lucene10_jar():
    return os.path.join(L10, "target", "lucene10-bench.jar")


def build_lucene10():
    """Builds tests/bench/peers/lucene10 with Maven (Lucene from Maven Central); None or why not."""
    jh = java25()
    if not jh:
        return "no JDK >= 21 (set LUCENE10_JAVA_HOME; Temurin 25 expected at /usr/lib/jvm/temurin-25-jdk-amd64)"
    jar = lucene10_jar()
    src = [os.path.join(L10, "pom.xml"), os.path.join(L10, "src")]
    if os.path.exists(jar) and os.path.getmtime(jar) >= newest_mtime(src) and \
            os.path.isdir(os.path.join(L10, "target", "lib")):
        return None
    if not shutil.which("mvn") and not apt_install(["maven"]):
        return "mvn missing (apt-get install maven)"
    cmd = ["mvn", "-q", "-B", "-DskipTests", "package"]
    if os.environ.get("LUCENE10_VERSION"):
        cmd.insert(1, "-Dlucene.version=" + os.environ["LUCENE10_VERSION"])
    say("building the Lucene 10 peer (Maven, Maven Central)")
    p = subprocess.run(cmd, cwd=L10, capture_output=True, text=True, env=dict(os.environ, JAVA_HOME=jh))
    if p.returncode != 0 or not os.path.exists(jar):
        return "mvn package failed: " + (p.stdout + p.stderr)[-800:]
    return None


def lucene10_cmd(args, heap="1g"):
    # as Elasticsearch starts its JVM: the Vector API module (Lucene 10 decodes
    # postings with it) and native access (madvise on its mmapped files)
    return [os.path.join(java25(), "bin", "java"), "-Xms" + heap, "-Xmx" + heap,
            "--add-modules", "jdk.incubator.vector", "--enable-native-access=ALL-UNNAMED",
            "-cp", lucene10_jar() + ":" + os.path.join(L10, "target", "lib", "*"), "Lucene10Bench"] + args


def cargo():
    for c in (os.environ.get("CARGO"), shutil.which("cargo"), os.path.expanduser("~/.cargo/bin/cargo"),
              "/root/.cargo/bin/cargo"):
        if c and os.path.exists(c):
            return c
    return None


def tantivy_bin():
    return os.path.join(TAN, "target", "release", "tantivy-bench")


def build_tantivy():
    """Builds tests/bench/peers/tantivy with cargo (tantivy from crates.io); None or why not."""
    b = tantivy_bin()
    src = [os.path.join(TAN, "Cargo.toml"), os.path.join(TAN, "Cargo.lock"), os.path.join(TAN, "src")]
    if os.path.exists(b) and os.path.getmtime(b) >= newest_mtime(src):
        return None
    c = cargo()
    if not c and apt_install(["cargo"]):
        c = cargo()
    if not c:
        return "cargo missing (rustup, or apt-get install cargo)"
    say("building the tantivy peer (cargo, crates.io)")
    p = subprocess.run([c, "build", "--release", "--locked", "-j", os.environ.get("W5_BUILD_JOBS", "2")],
                       cwd=TAN, capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(b):
        return "cargo build failed: " + p.stderr[-800:]
    return None


def lucene8_ok():
    try:
        lucene_cp()
    except RuntimeError:
        if not apt_install(["liblucene8-java"]):
            return "liblucene8-java missing"
    if not shutil.which("javac") and not apt_install(["default-jdk-headless"]):
        return "javac missing"
    return None


def xapian_ok():
    p = subprocess.run(["/usr/bin/python3", "-c", "import xapian"], capture_output=True)
    if p.returncode != 0 and not apt_install(["python3-xapian"]):
        return "python3-xapian missing"
    return None


def prepare(engine, build):
    """None when `engine` can run here, else why not (building or installing what it needs)."""
    if engine == "shoal":
        b = os.path.join(build, "bin", "shoal-engine")
        return None if os.path.exists(b) else "%s missing (build the project)" % b
    return {"lucene10": build_lucene10, "tantivy": build_tantivy, "lucene": lucene8_ok,
            "xapian": xapian_ok}[engine]()


def dir_bytes(d):
    n = 0
    for root, _, files in os.walk(d):
        for f in files:
            try:
                n += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return n


def short_corpus(n, seed):
    """The W3 generator's short-document mode (dictionary-entry length) at N."""
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, "short_%d_s%d.ndjson" % (n, seed))
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_w3.py"), str(n), "--seed", str(seed), "--short",
                        "--out", path + ".tmp"], check=True)
        os.rename(path + ".tmp", path)
    return path


SHORT_SIZES = "126236,926000"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", help="documents (a comma list runs each size in turn); default 1,000,000, "
                    "with --corpus short %s" % SHORT_SIZES)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--qseed", type=int, default=7)
    ap.add_argument("--engines", help="comma list of %s (default: all that can be built)" % ",".join(ENGINES))
    ap.add_argument("--corpus", default="w3", choices=("w3", "w2", "short"),
                    help="w3: text classes + facet cells; w2: facet cells on the W2 corpus; short: the W3 "
                         "generator's short-document mode (dictionary-entry length)")
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--doc", action="store_true",
                    help="write the table into docs/benchmarks.md (only for a run measured alone)")
    ap.add_argument("--no-doc", action="store_true", help="the default; kept for old commands")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse a Shoal index left by index_bench.py --keep-w5 (same build)")
    a = ap.parse_args()
    sizes = [int(x) for x in (a.n or (SHORT_SIZES if a.corpus == "short" else "1000000")).split(",")]
    if a.engines:
        engines = [e for e in a.engines.split(",") if e]
        for e in engines:
            if e not in ENGINES:
                sys.exit("w5: unknown engine %s (known: %s)" % (e, ",".join(ENGINES)))
            why = prepare(e, a.build)
            if why:
                sys.exit("w5: %s cannot run: %s" % (e, why))
    else:
        engines = []
        for e in ENGINES:
            why = prepare(e, a.build)
            if why:
                say("leaving out %s: %s" % (e, why))
            else:
                engines.append(e)
    say("engines: %s" % ",".join(engines))
    bad = []
    for n in sizes:
        if run_size(a, n, engines):
            bad.append(n)
    if bad:
        # BENCHMARKS.md rule 1: two engines that disagree on a count fail the run
        # (the table above, and the section written, show which counts)
        sys.exit("w5: engines disagree on counts at %s docs (see the counts agree column)"
                 % ", ".join(str(n) for n in bad))


def run_size(a, n, engines):
    if a.corpus == "short":
        docs = short_corpus(n, a.seed)
    else:
        docs = corpus(a.corpus, n, a.seed)
    qfile = os.path.join(CACHE, "q_%s_%d_s%d_q%d.ndjson" % (a.corpus, n, a.seed, a.qseed))
    if not os.path.exists(qfile):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_queries.py"), docs, qfile + ".tmp",
                        "--seed", str(a.qseed)], check=True)
        os.rename(qfile + ".tmp", qfile)
    mapping = os.path.join(HERE, "%s_mapping.json" % ("w3" if a.corpus == "short" else a.corpus))
    work = tempfile.mkdtemp(prefix="shoal-w5.", dir="/tmp")
    res = os.path.join(work, "results")
    os.makedirs(res)
    idx = {e: os.path.join(CACHE, "w5_%s_%s_%d_s%d" % (a.corpus, e, n, a.seed)) for e in engines}
    # a peer's cached index is rebuilt when the peer was rebuilt after it
    stamp = {"lucene10": lucene10_jar(), "tantivy": tantivy_bin()}
    versions = {}

    def fresh(e):
        done = idx[e] + ".done"
        return os.path.exists(done) and (e not in stamp or os.path.getmtime(done) >= os.path.getmtime(stamp[e]))

    try:
        # ---- indexes (rebuilt for Shoal every run: its format may change between commits)
        if "shoal" in engines and not (a.reuse and os.path.exists(idx["shoal"] + ".done")):
            shutil.rmtree(idx["shoal"], ignore_errors=True)
            run([os.path.join(a.build, "bin", "shoal-engine"), "index", "--mapping", mapping, "--in", docs,
                 "--out", idx["shoal"], "--force-merge", "1", "--threads", "2", "--id-field", "id"])
        for e in engines:
            if e == "shoal" or fresh(e):
                continue
            shutil.rmtree(idx[e], ignore_errors=True)
            say("indexing %d docs with %s" % (n, e))
            if e == "lucene":
                run(["java", "-Xms2g", "-Xmx2g", "-cp", lucene_classes(work) + ":" + lucene_cp(), "LuceneBench",
                     "index", docs, mapping, idx[e], "--threads", "2"])
            elif e == "lucene10":
                run(lucene10_cmd(["index", docs, mapping, idx[e], "--threads", "2"], heap="2g"))
            elif e == "tantivy":
                run([tantivy_bin(), "index", docs, mapping, idx[e], "--threads", "2"])
            else:
                run(["/usr/bin/python3", os.path.join(HERE, "xapian_bench.py"), "index", docs, idx[e]])
            open(idx[e] + ".done", "w").close()
        sizes = {e: dir_bytes(idx[e]) for e in engines}
        # ---- queries
        load0 = loadavg()
        say("load average before the queries %s" % load0)
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
                elif e == "lucene10":
                    p = run(lucene10_cmd(["query", idx[e], qfile, str(a.repeat)]), ok=(0, 3))
                elif e == "tantivy":
                    p = run([tantivy_bin(), "query", idx[e], qfile, str(a.repeat)], ok=(0, 3))
                else:
                    p = run(["/usr/bin/python3", os.path.join(HERE, "xapian_bench.py"), "query", idx[e], qfile,
                             str(a.repeat)])
                rows = parse_classes(p.stdout, e)
                if not rows:
                    print("w5: no per-class lines from %s:\n%s\n%s" % (e, p.stdout[-1000:], p.stderr[-1000:]),
                          file=sys.stderr)
                m = re.search(r"^(?:lucene|lucene10|tantivy) (.+?): \d+ queries", p.stderr, re.M)
                if m:
                    versions[e] = m.group(1)
                with open(os.path.join(res, "%s_%d.json" % (e, trial)), "w") as f:
                    for r in rows:
                        f.write(json.dumps(r) + "\n")
                print("w5 trial %d %s: %d classes; load average before %s, after %s; %s" % (
                    trial, e, len(rows), l0, loadavg(),
                    p.stderr.strip().splitlines()[-1:] if p.stderr.strip() else ""), flush=True)
        with open(os.path.join(res, "meta.json"), "w") as f:
            f.write(json.dumps({"meta": True, "index_bytes": sizes, "versions": versions, "engines": engines,
                                "n": n, "corpus": a.corpus}) + "\n")
        table = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "w5", res],
                               capture_output=True, text=True, check=True).stdout
        machine = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "machine"],
                                 capture_output=True, text=True).stdout.strip()
        print(table)
        if a.doc and not a.no_doc:
            nq = sum(1 for _ in open(qfile))
            vs = []
            if "lucene10" in engines:
                vs.append("Lucene %s in process on Temurin 25 (`tests/bench/peers/lucene10`, StandardAnalyzer "
                          "without stop words, query cache off, `IndexSearcher.count` for counts)"
                          % versions.get("lucene10", "10"))
            if "tantivy" in engines:
                vs.append("%s in process (`tests/bench/peers/tantivy`, SimpleTokenizer + LowerCaser, which "
                          "cuts the same tokens as StandardAnalyzer on this ASCII-folded corpus; no query cache "
                          "exists; TopDocs never counts totals)" % versions.get("tantivy", "tantivy"))
            if "lucene" in engines:
                vs.append("Lucene 8.8.1 in process (`LuceneBench query`, StandardAnalyzer without stop words)")
            if "xapian" in engines:
                vs.append("Xapian 1.4.22 through its Python bindings (which adds per-call overhead; "
                          "wildcard/regexp expanded over the term list per query because Xapian 1.4 has no such "
                          "query; sloppy phrase as OP_NEAR, which also matches reversed pairs, so its counts "
                          "exceed Lucene's)")
            gen = "gen_w3.py %d --seed %d --short" % (n, a.seed) if a.corpus == "short" else \
                "gen_%s.py %d --seed %d" % (a.corpus, n, a.seed)
            text = ("Measured: %s. Command: `tests/bench/w5.sh %d --corpus %s --engines %s --repeat %d "
                    "--trials %d --seed %d --qseed %d` (corpus `%s`, %d queries from `gen_queries.py --seed %d`). "
                    "One thread per engine, one segment per index, no query/result caches. qps per class = "
                    "runs / elapsed over %d rounds of the class's queries after a warm-up; medians of %d "
                    "trials, engines alternating (load average %s before the queries). %s. TOP_k = top k by "
                    "score without exact totals (`track_total_hits: false`), COUNT = exact total only.\n\n%s"
                    % (machine, n, a.corpus, ",".join(engines), a.repeat, a.trials, a.seed, a.qseed, gen, nq,
                       a.qseed, a.repeat, a.trials, load0, "; ".join(vs), table))
            section = {"w3": "W5", "w2": "W5_W2"}.get(a.corpus, "W5_SHORT_%d" % n)
            subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "section", section],
                           input=text, text=True, check=True)
            print("(written to docs/benchmarks.md, section %s)" % section)
        print("results: %s" % res)
        m = re.search(r"Classes whose counts disagree between engines [^:]*: (\d+) of", table)
        return bool(m and int(m.group(1)))
    finally:
        shutil.rmtree(os.path.join(work, "lucene-classes"), ignore_errors=True)


if __name__ == "__main__":
    main()
