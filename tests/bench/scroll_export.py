#!/usr/bin/env python3
"""Export rate over scroll against plain _search, and the _reindex rate, on a
3-node cluster (issue #11's figures). Run it on a quiet machine: a table
measured while other work shares the cores is not a figure to publish.

    python3 tests/bench/scroll_export.py --start             # a 3-node loopback cluster
    python3 tests/bench/scroll_export.py --url http://127.0.0.1:9200   # an existing one
    options: --docs 200000 --page 1000 --shards 6 --replicas 1 --runs 3

It loads --docs documents of ~1 KB (skipped when the index already holds
them), then, --runs times each, measures
  scroll   ?scroll=1m, sort _doc, --page per page, until exhausted
  search   plain _search of --page hits, from=0, repeated as many times as
           the scroll had pages (the cost of one page without a context)
  pit      point in time, search_after over _shard_doc, --page per page
  reindex  POST /_reindex into a fresh index (refresh at the end)
and prints docs/s and MB/s (response bytes) per run and the median, as a
Markdown table for docs/benchmarks.md. Standard library only.
"""
import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "api"))

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray").split()


class Client:
    def __init__(self, url):
        u = url.split("//", 1)[-1].rstrip("/")
        host, _, port = u.partition(":")
        self.conn = http.client.HTTPConnection(host, int(port or 9200), timeout=600)

    def req(self, method, path, body=None):
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        hdrs = {"Content-Type": "application/x-ndjson" if path.endswith("_bulk") or
                "_bulk?" in path else "application/json"}
        self.conn.request(method, path, data, hdrs)
        r = self.conn.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None), len(raw)


def load(c, index, docs, shards, replicas):
    st, b, _ = c.req("GET", "/%s/_count" % index)
    if st == 200 and b["count"] == docs:
        return
    c.req("DELETE", "/" + index)
    st, b, _ = c.req("PUT", "/" + index, {"settings": {"number_of_shards": shards,
                                                       "number_of_replicas": replicas,
                                                       "refresh_interval": "-1"}})
    assert st == 200, b
    rnd = random.Random(7)
    for start in range(0, docs, 2000):
        lines = []
        for i in range(start, min(docs, start + 2000)):
            lines.append(json.dumps({"index": {"_index": index, "_id": "d%d" % i}}))
            lines.append(json.dumps({"n": i, "k": rnd.choice(WORDS),
                                     "body": " ".join(rnd.choice(WORDS) for _ in range(150))}))
        st, b, _ = c.req("POST", "/_bulk", "\n".join(lines) + "\n")
        assert st == 200 and not b["errors"], str(b)[:300]
    c.req("POST", "/%s/_refresh" % index)


def run_scroll(c, index, page):
    t0 = time.time()
    st, b, nbytes = c.req("POST", "/%s/_search?scroll=1m" % index, {"size": page, "sort": ["_doc"]})
    assert st == 200, b
    sid, docs, pages = b["_scroll_id"], len(b["hits"]["hits"]), 1
    while b["hits"]["hits"]:
        st, b, n = c.req("POST", "/_search/scroll", {"scroll": "1m", "scroll_id": sid})
        assert st == 200, b
        docs += len(b["hits"]["hits"])
        nbytes += n
        pages += 1
    dt = time.time() - t0
    c.req("DELETE", "/_search/scroll", {"scroll_id": sid})
    return docs, nbytes, dt, pages


def run_search(c, index, page, pages):
    t0, docs, nbytes = time.time(), 0, 0
    for _ in range(pages):
        st, b, n = c.req("POST", "/%s/_search" % index, {"size": page})
        assert st == 200, b
        docs += len(b["hits"]["hits"])
        nbytes += n
    return docs, nbytes, time.time() - t0, pages


def run_pit(c, index, page):
    st, b, _ = c.req("POST", "/%s/_pit?keep_alive=1m" % index)
    assert st == 200, b
    pid, after, docs, nbytes, pages = b["id"], None, 0, 0, 0
    t0 = time.time()
    while True:
        body = {"size": page, "sort": ["_shard_doc"], "pit": {"id": pid, "keep_alive": "1m"}}
        if after:
            body["search_after"] = after
        st, b, n = c.req("POST", "/_search", body)
        assert st == 200, b
        nbytes += n
        pages += 1
        hits = b["hits"]["hits"]
        if not hits:
            break
        docs += len(hits)
        after = hits[-1]["sort"]
    dt = time.time() - t0
    c.req("DELETE", "/_pit", {"id": pid})
    return docs, nbytes, dt, pages


def run_reindex(c, index, page):
    dest = index + "-reindexed"
    c.req("DELETE", "/" + dest)
    t0 = time.time()
    st, b, n = c.req("POST", "/_reindex?refresh=true",
                     {"source": {"index": index, "size": page}, "dest": {"index": dest}})
    dt = time.time() - t0
    assert st == 200 and not b["failures"], str(b)[:300]
    c.req("DELETE", "/" + dest)
    return b["created"] + b["updated"], n, dt, b["batches"]


def start_cluster():
    from shoal import ClusterNode, cluster_file
    tmp = tempfile.mkdtemp(prefix="shoal-scroll-bench-")
    cfile = os.path.join(tmp, "cluster.json")
    names = ["node-1", "node-2", "node-3"]
    ports = cluster_file(cfile, [(n, None) for n in names])
    nodes = []
    for n in names:
        d = os.path.join(tmp, n)
        os.makedirs(d)
        nodes.append(ClusterNode(cfile, n, ports[n][0], data=d))
    for x in nodes:
        st, b = x.req("GET", "/_cluster/health?wait_for_status=green&wait_for_nodes=3"
                      "&timeout=60s", timeout=80)
        assert b.get("status") == "green", b
    return tmp, nodes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--start", action="store_true")
    ap.add_argument("--docs", type=int, default=200000)
    ap.add_argument("--page", type=int, default=1000)
    ap.add_argument("--shards", type=int, default=6)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--index", default="scroll-bench")
    a = ap.parse_args()
    if not a.url and not a.start:
        ap.error("give --url or --start")
    tmp, nodes = None, []
    if a.start:
        tmp, nodes = start_cluster()
        a.url = "http://127.0.0.1:%d" % nodes[0].port
    try:
        c = Client(a.url)
        load(c, a.index, a.docs, a.shards, a.replicas)
        rows = {k: [] for k in ("scroll", "search", "pit", "reindex")}
        for _ in range(a.runs):
            sc = run_scroll(c, a.index, a.page)
            rows["scroll"].append(sc)
            rows["search"].append(run_search(c, a.index, a.page, sc[3]))
            rows["pit"].append(run_pit(c, a.index, a.page))
            rows["reindex"].append(run_reindex(c, a.index, a.page))
        print("| mode | docs | pages | docs/s (median of %d) | MB/s | runs docs/s |" % a.runs)
        print("|---|---|---|---|---|---|")
        for k, rs in rows.items():
            rates = [d / t for d, _, t, _ in rs]
            mbs = [b / t / 1e6 for _, b, t, _ in rs]
            print("| %s | %d | %d | %.0f | %.1f | %s |" % (
                k, rs[0][0], rs[0][3], statistics.median(rates), statistics.median(mbs),
                " ".join("%.0f" % r for r in rates)))
    finally:
        for x in nodes:
            x.cleanup()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
