#!/usr/bin/env python3
"""Runs the YAML conformance tests (tests/conformance/*.yml, Elasticsearch's
REST test format, issue #26) against a solo node and then a 3-node static
cluster. A failure listed in tests/conformance/known_failures.txt (a Shoal
bug with its issue) does not fail the run; an unlisted one does; a listed
one that now passes everywhere is reported so the list can shrink."""
import glob
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONF = os.path.join(os.path.dirname(HERE), "conformance")
sys.path.insert(0, HERE)
sys.path.insert(0, CONF)

import run as conformance  # noqa: E402
import shoal  # noqa: E402
from shoal import ClusterNode, Node, cluster_file, eq  # noqa: E402

NAMES = ("node-1", "node-2", "node-3")


def run_all(port, mode, files, known):
    client = conformance.Client("http://127.0.0.1:%d" % port)
    conformance.wipe(client)
    results = []
    t0 = time.time()
    print("== %s: %d files" % (mode, len(files)), flush=True)
    for f in files:
        results += conformance.run_file(
            client, f, out=lambda line: print("[%s] %s" % (mode, line), flush=True))
    client.close()
    unexpected, _ = conformance.summarize(results, known, mode)
    print("== %s: %.1fs" % (mode, time.time() - t0), flush=True)
    return results, unexpected


def main():
    files = sorted(glob.glob(os.path.join(CONF, "*.yml")))
    known = conformance.load_known(os.path.join(CONF, "known_failures.txt"))
    tmp = tempfile.mkdtemp(prefix="shoal-conformance-")
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    args = ["-E", "path.repo=" + repo]
    by_mode = {}
    bad = []
    rc = 0
    try:
        with Node(args=args) as n:
            by_mode["solo"], unexpected = run_all(n.port, "solo", files, known)
            bad += [("solo", r) for r in unexpected]
        cfile = os.path.join(tmp, "cluster.json")
        ports = cluster_file(cfile, [(n, None) for n in NAMES])
        nodes = []
        try:
            for name in NAMES:
                d = os.path.join(tmp, name)
                os.makedirs(d)
                nodes.append(ClusterNode(cfile, name, ports[name][0], data=d, args=args))
            st, b = nodes[0].req("GET", "/_cluster/health?wait_for_nodes=3&timeout=60s",
                                 timeout=80)
            eq((st, b.get("number_of_nodes")), (200, 3), "3 nodes")
            by_mode["cluster"], unexpected = run_all(nodes[0].port, "cluster", files, known)
            bad += [("cluster", r) for r in unexpected]
        finally:
            for node in nodes:
                r = node.cleanup()
                if r not in (0, None):
                    print("FAIL %s exited with %s" % (node.name, r))
                    rc = 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # a listed entry is fixed when it passes in every run it applies to
    for (mode, tid), why in sorted(known.items(), key=lambda kv: kv[0][1]):
        runs = [m for m in by_mode if mode in (None, m)]
        outcome = [next((r["status"] for r in by_mode[m] if r["id"] == tid), None)
                   for m in runs]
        if outcome and all(s == "passed" for s in outcome):
            print("NOW PASSES, remove it from known_failures.txt: %s%s" %
                  (mode + ":" if mode else "", tid))
        elif all(s is None for s in outcome):
            print("LISTED BUT NOT FOUND in known_failures.txt: %s" % tid)
    if shoal.SANITIZER_REPORTS:
        print("FAIL %d sanitizer report(s) in node logs" % len(shoal.SANITIZER_REPORTS))
        rc = 1
    for mode, r in bad:
        print("UNLISTED FAILURE [%s] %s\n    %s" % (mode, r["id"], r["detail"]))
    for mode, results in by_mode.items():
        n = {k: sum(1 for r in results if r["status"] == k) for k in ("passed", "failed", "skipped")}
        print("%s: %d passed, %d failed (listed Shoal bugs but %d), %d skipped" %
              (mode, n["passed"], n["failed"], sum(1 for m, _ in bad if m == mode), n["skipped"]))
    print("%d passed, %d failed" % (
        sum(1 for m in by_mode.values() for r in m if r["status"] == "passed"), len(bad) + rc))
    sys.exit(1 if bad or rc else 0)


if __name__ == "__main__":
    main()
