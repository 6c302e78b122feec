#!/usr/bin/env python3
"""BM25 cross-check: Shoal's top-10 scores against Lucene 8.8's on one corpus.

Usage: bm25_check.py [N] [--build DIR] [--seed S] [--tolerance 1e-5]
Generates W3 with N documents (default 3000), its query file, starts
`shoal --solo` on a free loopback port, loads the corpus into a one-shard
index (same mapping), and runs every scored TOP_10 query (term, AND, OR,
phrase, sloppy phrase) through `_search`; Lucene's `LuceneBench scores`
ranks the same queries over the same documents in one segment. For every
query the ten (id, score) pairs must agree: same ids, scores equal to the
relative tolerance (ties may be ordered differently). Exit 1 on any
difference. Not part of the default test run (it needs Java and Lucene).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SCORED = ("term_", "and_", "or_", "phrase", "sloppy_phrase")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http(port, method, path, body=None, ctype="application/json"):
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method=method,
                                 headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"{}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=3000)
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--tolerance", type=float, default=1e-5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shoal-bm25.")
    proc = None
    try:
        docs, qfile = os.path.join(tmp, "docs.ndjson"), os.path.join(tmp, "q.ndjson")
        subprocess.run([sys.executable, os.path.join(HERE, "gen_w3.py"), str(a.n), "--seed", str(a.seed),
                        "--out", docs], check=True)
        subprocess.run([sys.executable, os.path.join(HERE, "gen_queries.py"), docs, qfile, "--seed", "7"],
                       check=True)
        mapping = os.path.join(HERE, "w3_mapping.json")
        luc = subprocess.run(["bash", os.path.join(HERE, "lucene", "run.sh"), "scores", docs, qfile, mapping],
                             capture_output=True, text=True, env=dict(os.environ, JAVA_OPTS="-Xmx1g"))
        if luc.returncode != 0:
            sys.exit("lucene scores failed: " + luc.stderr[-1000:])
        lucene = {}
        for line in luc.stdout.splitlines():
            o = json.loads(line)
            lucene[o["line"]] = o["hits"]
        port = free_port()
        data = os.path.join(tmp, "data")
        proc = subprocess.Popen([os.path.join(a.build, "bin", "shoal"), "--solo", "--data", data,
                                 "--http", "127.0.0.1:%d" % port], stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(tmp, "shoal.log"), "w"))
        for _ in range(200):
            try:
                http(port, "GET", "/")
                break
            except OSError:
                if proc.poll() is not None:
                    sys.exit("shoal exited: " + open(os.path.join(tmp, "shoal.log")).read()[-1000:])
                time.sleep(0.1)
        body = {"settings": {"number_of_shards": 1, "number_of_replicas": 0},
                "mappings": json.load(open(mapping))}
        http(port, "PUT", "/w3", json.dumps(body))
        lines = open(docs).read().splitlines()
        for i in range(0, len(lines), 2000):
            bulk = "".join('{"index":{"_id":"%s"}}\n%s\n' % (json.loads(l)["id"], l) for l in lines[i:i + 2000])
            r = http(port, "POST", "/w3/_bulk", bulk, "application/x-ndjson")
            if r.get("errors"):
                sys.exit("bulk errors: %s" % json.dumps(r)[:500])
        http(port, "POST", "/w3/_refresh")
        http(port, "POST", "/w3/_forcemerge?max_num_segments=1")
        checked = bad = 0
        worst = 0.0
        for i, line in enumerate(open(qfile)):
            q = json.loads(line)
            if i not in lucene or not q["class"].endswith("TOP_10") or not q["class"].startswith(SCORED):
                continue
            r = http(port, "POST", "/w3/_search", json.dumps({"query": q["body"]["query"], "size": 10}))
            mine = [(h["_id"], h["_score"]) for h in r["hits"]["hits"]]
            theirs = [(h[0], h[1]) for h in lucene[i]]
            checked += 1
            ok = len(mine) == len(theirs)
            ls = dict(theirs)
            # the 10th place may hold a different member of a tie
            last = theirs[-1][1] if theirs else 0
            for doc, sc in mine:
                ref = ls.get(doc)
                if ref is None:
                    if abs(sc - last) > a.tolerance * max(1.0, abs(last)):
                        ok = False
                    continue
                rel = abs(sc - ref) / max(abs(ref), 1e-30)
                worst = max(worst, rel)
                if rel > a.tolerance:
                    ok = False
            if not ok:
                bad += 1
                if bad <= 5:
                    print("differs: %s %s\n  shoal  %s\n  lucene %s" % (q["class"], json.dumps(q["body"]["query"]),
                                                                   mine, theirs))
        print("bm25_check: %d scored queries on %d docs, %d differ, worst relative score error %.2e"
              % (checked, a.n, bad, worst))
        sys.exit(1 if bad or not checked else 0)
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
