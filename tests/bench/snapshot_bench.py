#!/usr/bin/env python3
"""Snapshot and restore throughput (MB/s) against `cp -r` of the same files
on the same disk (issue #12's figures).

Usage: snapshot_bench.py [--docs N] [--shards S] [--runs R] [--build DIR]
                         [--dir DIR] [--doc-bytes B]

Starts `shoal --solo` on a free loopback port with path.repo under DIR
(default a temp dir; put it on the disk you want to measure), loads N
generated documents (default 200,000 of ~1 KB), flushes, and then, R times
(default 3; the median is reported):
  - snapshot: PUT /_snapshot/bench/sN?wait_for_completion=true into a fresh
    repository (every file is copied): bytes of the shard files / seconds;
  - snapshot again, unchanged index (the incremental case): seconds;
  - restore: POST .../_restore into a renamed index: the same bytes / seconds;
  - cp -r of the index's data directory to a fresh directory on the same
    disk, followed by `sync` (the snapshot fsyncs every blob too).
Drops no caches (run as root with --drop-caches to echo 3 >
/proc/sys/vm/drop_caches before each timed step). Prints a Markdown table
for docs/benchmarks.md.

Not part of any test run. The figures are only worth publishing from a
quiet machine (BENCHMARKS.md's rules): this script was written on a busy
shared VM and has not been run for figures.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Shoal:
    def __init__(self, binary, data, repo):
        self.port = free_port()
        self.log = open(os.path.join(data, "bench.log"), "ab")
        self.proc = subprocess.Popen([binary, "--solo", "--data", data, "--http",
                                      "127.0.0.1:%d" % self.port, "--log-level", "warn",
                                      "-E", "path.repo=" + repo],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                self.req("GET", "/")
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("shoal did not start")

    def req(self, method, path, body=None, ctype="application/json", timeout=3600):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        r = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data,
                                   method=method, headers={"Content-Type": ctype})
        with urllib.request.urlopen(r, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)


def drop_caches(enabled):
    if enabled:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=200000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--doc-bytes", type=int, default=1000)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default=None)
    ap.add_argument("--drop-caches", action="store_true")
    a = ap.parse_args()
    base = a.dir or tempfile.mkdtemp(prefix="shoal-snapbench-")
    data, repo = os.path.join(base, "data"), os.path.join(base, "repo")
    os.makedirs(data, exist_ok=True)
    os.makedirs(repo, exist_ok=True)
    node = Shoal(os.path.join(a.build, "bin", "shoal"), data, repo)
    try:
        node.req("PUT", "/bench", {"settings": {"number_of_shards": a.shards,
                                                "number_of_replicas": 0,
                                                "refresh_interval": "-1"}})
        words = ["w%d" % i for i in range(5000)]
        batch = []
        for i in range(a.docs):
            text = " ".join(words[(i * 31 + k * 7) % len(words)]
                            for k in range(a.doc_bytes // 6))
            batch.append(json.dumps({"index": {"_index": "bench", "_id": str(i)}}))
            batch.append(json.dumps({"n": i, "t": text}))
            if len(batch) >= 2000 or i == a.docs - 1:
                node.req("POST", "/_bulk", ("\n".join(batch) + "\n").encode(),
                         "application/x-ndjson")
                batch = []
        node.req("POST", "/bench/_refresh")
        node.req("POST", "/bench/_flush")
        uuid = node.req("GET", "/bench/_settings")["bench"]["settings"]["index"]["uuid"]
        src = os.path.join(data, "indices", uuid)
        size = dir_bytes(src)
        mb = size / 1048576.0
        full, incr, rest, cp = [], [], [], []
        for run in range(a.runs):
            loc = os.path.join(repo, "r%d" % run)
            node.req("PUT", "/_snapshot/bench%d" % run,
                     {"type": "fs", "settings": {"location": loc}})
            drop_caches(a.drop_caches)
            t0 = time.time()
            node.req("PUT", "/_snapshot/bench%d/full?wait_for_completion=true" % run, {})
            full.append(time.time() - t0)
            t0 = time.time()
            node.req("PUT", "/_snapshot/bench%d/again?wait_for_completion=true" % run, {})
            incr.append(time.time() - t0)
            drop_caches(a.drop_caches)
            t0 = time.time()
            node.req("POST", "/_snapshot/bench%d/full/_restore?wait_for_completion=true" % run,
                     {"rename_pattern": "bench", "rename_replacement": "restored%d" % run})
            rest.append(time.time() - t0)
            node.req("DELETE", "/restored%d" % run)
            dst = os.path.join(base, "cp%d" % run)
            drop_caches(a.drop_caches)
            t0 = time.time()
            subprocess.run(["cp", "-r", src, dst], check=True)
            subprocess.run(["sync"], check=True)
            cp.append(time.time() - t0)
            shutil.rmtree(dst)
            shutil.rmtree(loc)
        med = statistics.median
        print("%d docs, %d shards, %.1f MB of shard files, median of %d runs%s"
              % (a.docs, a.shards, mb, a.runs, ", caches dropped" if a.drop_caches else ""))
        print()
        print("| step | seconds | MB/s |")
        print("|---|---|---|")
        print("| snapshot (all files new) | %.2f | %.0f |" % (med(full), mb / med(full)))
        print("| snapshot again (nothing changed) | %.2f | - |" % med(incr))
        print("| restore | %.2f | %.0f |" % (med(rest), mb / med(rest)))
        print("| `cp -r` + `sync` | %.2f | %.0f |" % (med(cp), mb / med(cp)))
    finally:
        node.stop()
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
