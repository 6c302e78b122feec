#!/usr/bin/env python3
"""Indexing benchmark (W2 and W3): Shoal vs Lucene 8.8 vs Sphinx's indexer.

Usage: index_bench.py [N] [--w3 N3] [--trials T] [--corpora w2,w3] [--engines shoal,lucene,sphinx]
                      [--build DIR] [--threads 2] [--no-doc] [--seed S]
Same corpus, same machine, same run, engines alternating within each trial;
each engine ends with one segment. Medians of T trials (default 3).

Measured per run (process-level, from wait4 rusage and /proc sampling):
wall time to searchable and of the force merge (as each engine reports its
own phases; total = their sum), CPU seconds of the whole process (wait4
rusage: parsing, start-up and exit included), docs per CPU-second, index
bytes on disk, and busy threads during the force merge (process CPU seconds
in the merge phase / its wall time, as each engine reports it; from
/proc/PID/stat samples every 20 ms when Shoal does not report it).
Corpora are cached in $BENCH_CACHE (default /tmp/shoal-bench).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CACHE = os.environ.get("BENCH_CACHE", "/tmp/shoal-bench")
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / TICK  # utime + stime, all threads
    except (OSError, IndexError):
        return None


def measured(cmd, **kw):
    """Runs cmd; returns (rc, stdout, stderr, wall_s, cpu_s, samples[(t, cpu)])."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    samples = []
    out, err = [], []
    ts = [threading.Thread(target=lambda s, b: b.append(s.read()), args=(p.stdout, out)),
          threading.Thread(target=lambda s, b: b.append(s.read()), args=(p.stderr, err))]
    for t in ts:
        t.start()
    while True:
        c = proc_cpu(p.pid)
        if c is not None:
            samples.append((time.time() - t0, c))
        try:
            _, status, ru = os.wait4(p.pid, os.WNOHANG)
        except ChildProcessError:
            break
        if _:
            break
        time.sleep(0.02)
    wall = time.time() - t0
    for t in ts:
        t.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, "".join(out), "".join(err), wall, ru.ru_utime + ru.ru_stime, samples


def cpu_at(samples, t):
    """CPU seconds at time t by linear interpolation over the samples."""
    prev = (0.0, 0.0)
    for s in samples:
        if s[0] >= t:
            if s[0] == prev[0]:
                return s[1]
            return prev[1] + (s[1] - prev[1]) * (t - prev[0]) / (s[0] - prev[0])
        prev = s
    return prev[1]


def dir_bytes(d):
    n = 0
    for root, _, files in os.walk(d):
        for f in files:
            try:
                n += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return n


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def find_num(obj, text, keys, pattern):
    """A number from the engine's JSON (first key present) or from its text."""
    if obj:
        for k in keys:
            if isinstance(obj.get(k), (int, float)):
                return float(obj[k])
    m = re.search(pattern, text, re.I)
    return float(m.group(1)) if m else None


def corpus(kind, n, seed):
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, "%s_%d_s%d.ndjson" % (kind, n, seed))
    if not os.path.exists(path):
        tmp = path + ".tmp"
        subprocess.run([sys.executable, os.path.join(HERE, "gen_%s.py" % kind), str(n), "--seed", str(seed),
                        "--out", tmp], check=True)
        os.rename(tmp, path)
    return path


def kv_lines(text):
    """`key: number` lines (shoal-engine's output) as a dict."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*([A-Za-z_]+)\s*[:=]\s*(-?[0-9]+(?:\.[0-9]+)?)\s*$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def keep_or_remove(path, keep):
    if keep:
        shutil.rmtree(keep, ignore_errors=True)
        shutil.move(path, keep)
        open(keep + ".done", "w").close()
    else:
        shutil.rmtree(path, ignore_errors=True)


def run_shoal(build, docs, mapping, threads, work, keep=None):
    out = os.path.join(work, "shoal-idx")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(build, "bin", "shoal-engine"), "index", "--mapping", mapping, "--in", docs,
           "--out", out, "--force-merge", "1", "--threads", str(threads), "--id-field", "id"]
    rc, so, se, wall, cpu, samples = measured(cmd)
    if rc != 0:
        raise RuntimeError("shoal-engine index failed (%d): %s" % (rc, (se or so)[-800:]))
    obj = last_json(so) or kv_lines(so)
    text = so + "\n" + se
    ts = find_num(obj, text, ["searchable_s", "time_to_searchable_s", "until_searchable_s"],
                  r"searchable[^0-9\n]*([0-9]+(?:\.[0-9]+)?)")
    tm = find_num(obj, text, ["force_merge_s", "merge_s"], r"force[ _-]?merge[^0-9\n]*([0-9]+(?:\.[0-9]+)?)")
    docs_n = find_num(obj, text, ["docs", "documents"], r"([0-9]+)\s+docs")
    segs = find_num(obj, text, ["segments", "segment_count"], r"([0-9]+)\s+segments?")
    busy = find_num(obj, "", ["force_merge_busy_threads", "merge_busy_threads"], r"^$")
    if obj.get("failed"):
        raise RuntimeError("shoal-engine index: %d documents failed" % obj["failed"])
    r = {"engine": "shoal", "docs": docs_n, "process_wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
         "index_bytes": dir_bytes(out), "segments": segs, "raw": obj}
    r["searchable_s"], r["force_merge_s"] = ts, tm
    r["total_s"] = round(ts + tm, 3) if ts is not None and tm is not None else round(wall, 3)
    if busy is None and tm:
        # not reported: CPU over the last tm seconds of the process, from the samples
        busy = round((cpu - cpu_at(samples, max(0.0, wall - tm))) / tm, 2) if tm > 0.05 else None
    r["merge_busy_threads"] = busy
    keep_or_remove(out, keep)
    return r


def lucene_classes(work):
    cls = os.path.join(work, "lucene-classes")
    if not os.path.isdir(cls):
        os.makedirs(cls)
        subprocess.run(["javac", "-nowarn", "-d", cls, "-cp", lucene_cp(),
                        os.path.join(HERE, "lucene", "LuceneBench.java")], check=True)
    return cls


def lucene_cp():
    import glob
    jars = []
    for j in ("lucene-core", "lucene-analyzers-common"):
        g = sorted(glob.glob("/usr/share/java/%s-8*.jar" % j))
        if not g:
            raise RuntimeError("liblucene8-java missing")
        jars.append(g[0])
    return ":".join(jars)


def run_lucene(docs, mapping, threads, work, keep=None):
    out = os.path.join(work, "lucene-idx")
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["java", "-Xms2g", "-Xmx2g", "-cp", lucene_classes(work) + ":" + lucene_cp(), "LuceneBench",
           "index", docs, mapping, out, "--threads", str(threads), "--ram-mb", "256"]
    rc, so, se, wall, cpu, samples = measured(cmd)
    if rc != 0:
        raise RuntimeError("lucene index failed: " + se[-800:])
    o = last_json(so)
    r = {"engine": "lucene", "docs": o["docs"], "searchable_s": o["searchable_s"],
         "force_merge_s": o["force_merge_s"], "total_s": o["total_s"], "process_wall_s": round(wall, 3),
         "cpu_s": round(cpu, 3),
         "cpu_merge_s": o["cpu_merge_s"], "merge_busy_threads": o["merge_busy_threads"],
         "index_bytes": o["index_bytes"], "segments": o["segments"], "raw": o}
    keep_or_remove(out, keep)
    return r


def run_sphinx(docs, work):
    out = os.path.join(work, "sphinx-idx")
    shutil.rmtree(out, ignore_errors=True)
    p = subprocess.run(["bash", os.path.join(HERE, "sphinx_index.sh"), docs, out],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("sphinx indexer failed: " + p.stderr[-800:])
    o = last_json(p.stdout)
    shutil.rmtree(out, ignore_errors=True)
    o["raw"] = dict(o)
    return o


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=1000000)
    ap.add_argument("--w3", type=int, help="W3 size (default: N)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--corpora", default="w2,w3")
    ap.add_argument("--engines", default="shoal,lucene,sphinx")
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--results", help="directory for the JSON results (default: a temp dir)")
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--keep-w5", action="store_true",
                    help="keep the last trial's Shoal and Lucene indexes where w5.sh --reuse finds them")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="shoal-index-bench.", dir="/tmp")
    res = a.results or os.path.join(work, "results")
    os.makedirs(res, exist_ok=True)
    engines = a.engines.split(",")
    sizes = {"w2": a.n, "w3": a.w3 or a.n}
    try:
        for kind in a.corpora.split(","):
            docs = corpus(kind, sizes[kind], a.seed)
            mapping = os.path.join(HERE, "%s_mapping.json" % kind)
            label = "%s (%s docs)" % (kind.upper(), "{:,}".format(sizes[kind]))
            for trial in range(1, a.trials + 1):
                order = engines if trial % 2 else list(reversed(engines))
                for e in order:
                    try:
                        keep = None
                        if a.keep_w5 and trial == a.trials and e in ("shoal", "lucene"):
                            keep = os.path.join(CACHE, "w5_%s_%s_%d_s%d" % (kind, e, sizes[kind], a.seed))
                        if e == "shoal":
                            r = run_shoal(a.build, docs, mapping, a.threads, work, keep)
                        elif e == "lucene":
                            r = run_lucene(docs, mapping, a.threads, work, keep)
                        else:
                            r = run_sphinx(docs, work)
                    except Exception as ex:  # one engine failing must not hide the others
                        print("index_bench: %s on %s: %s" % (e, kind, ex), file=sys.stderr)
                        continue
                    r["corpus"] = label
                    r["trial"] = trial
                    if r.get("docs") is None:
                        r["docs"] = sizes[kind]
                    r["docs_per_cpu_s"] = round(r["docs"] / r["cpu_s"]) if r.get("cpu_s") else None
                    with open(os.path.join(res, "%s_%s.json" % (kind, e)), "a") as f:
                        f.write(json.dumps(r) + "\n")
                    print("%-22s %-7s trial %d: total %.2fs cpu %.2fs docs/cpu-s %s bytes %s busy %s" % (
                        label, e, trial, r["total_s"], r["cpu_s"], r["docs_per_cpu_s"], r["index_bytes"],
                        r.get("merge_busy_threads")), flush=True)
        table = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "index", res],
                               capture_output=True, text=True, check=True).stdout
        machine = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "machine"],
                                 capture_output=True, text=True).stdout.strip()
        print()
        print(table)
        if not a.no_doc:
            cmd = "tests/bench/index_bench.sh %d%s --trials %d --threads %d --seed %d" % (
                a.n, " --w3 %d" % a.w3 if a.w3 else "", a.trials, a.threads, a.seed)
            text = ("Measured: %s. Command: `%s`. Shoal: `shoal-engine index --mapping M --in D --out DIR "
                    "--force-merge 1 --threads %d`; Lucene %s: `LuceneBench index` (IndexWriter, %d indexing "
                    "threads, 256 MB RAM buffer, default merge policy and scheduler, `forceMerge(1)`); "
                    "Sphinx 2.2.11 `indexer` (single-threaded, mem_limit 256M, writes one index directly, "
                    "no merge step). CPU-s are the whole process's (wait4 rusage), so JSON parsing and "
                    "JVM start-up count. Medians of %d trial(s) (min–max).\n\n%s"
                    % (machine, cmd, a.threads, "8.8.1", a.threads, a.trials, table))
            subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "section", "INDEXING"],
                           input=text, text=True, check=True)
            print("(written to docs/benchmarks.md, section INDEXING)")
        print("results: %s" % res)
    finally:
        for d in ("shoal-idx", "lucene-idx", "sphinx-idx", "lucene-classes"):
            shutil.rmtree(os.path.join(work, d), ignore_errors=True)


if __name__ == "__main__":
    main()
