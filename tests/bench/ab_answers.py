#!/usr/bin/env python3
"""Answers before/after: do two builds give the same answers?

Loads N W3 documents (gen_w3.py) into a 2-shard index with BASE's `shoal`,
unmerged (several segments per shard), then runs every query of
gen_queries.py against BASE and then NEW on the same data directory, each
query twice (as generated, and with exact totals and at least 10 hits),
and compares the whole answers: totals, max_score, every hit's id, score
and sort values, and aggregations. A speed change that alters an answer
shows here. With --own-copies each build loads the documents itself and
force-merges every shard to one segment before its queries: a change of
the segment format or of how documents are indexed shows there (BASE's
segments, read by NEW, are the default run). Each build's own copy may
order documents differently (two runs of one build do too: background
merges and, since indexing buffers, the parts a batch is split into),
which reorders hits of equal score, so --own-copies compares equal hits as
unordered (same_ties_unordered); with --merged both builds read BASE's
documents force-merged to one segment per shard instead; --own-copies
--unmerged leaves each build's own copy unmerged (several segments per
shard, each written by that build). --shards sets the index's shards (2). Not timed; not part of
the test run.

Usage: tests/bench/ab_answers.py BASE_BUILD NEW_BUILD [--n 20000] [--port P]
       [--own-copies [--unmerged] | --merged] [--shards 2]
Needs dict-gcide (gen_w3.py); exits 1 when any answer differs."""
import argparse, json, os, shutil, socket, subprocess, sys, tempfile, time, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def req(port, method, path, body=None, ctype="application/json"):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    r = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method=method,
                               headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(r, timeout=60) as f:
            return f.status, json.load(f)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def start(build, data, port):
    p = subprocess.Popen([os.path.join(build, "bin", "shoal"), "--solo", "--data", data,
                          "--http", "127.0.0.1:%d" % port],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if p.poll() is not None:
            sys.exit("shoal of %s exited (port %d taken?)" % (build, port))
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=1)
            time.sleep(0.2)
            if p.poll() is not None:  # another process answered on the port
                sys.exit("shoal of %s exited (port %d taken?)" % (build, port))
            return p
        except Exception:
            time.sleep(0.1)
    p.kill()
    sys.exit("shoal of %s did not answer" % build)


def stop(p):
    p.terminate()
    p.wait(30)


def answers(port, queries):
    out = []
    for q in queries:
        b = q["body"]
        for body in (dict(b), dict(b, track_total_hits=True, size=max(b.get("size", 10), 10))):
            body.pop("_source", None)
            st, j = req(port, "POST", "/w3/_search", body)
            if st != 200:
                out.append({"class": q["class"], "status": st, "error": j.get("error")})
                continue
            h = j["hits"]
            out.append({"class": q["class"], "total": h.get("total"), "max": h["max_score"],
                        "hits": [(x["_id"], x["_score"], x.get("sort")) for x in h["hits"]],
                        "aggs": j.get("aggregations")})
    return out


def tie_runs(hits):
    """Hits as runs of equal (score, sort values), in order."""
    runs = []
    for h in hits:
        key = (h[1], json.dumps(h[2]))
        if runs and runs[-1][0] == key:
            runs[-1][1].append(h[0])
        else:
            runs.append((key, [h[0]]))
    return runs


def same_ties_unordered(x, y):
    """Equal answers up to the order of equal-scored hits: the same totals,
    max_score and aggregations, the same scores in the same order, the same
    ids within every run of equal hits but the page's last (a page may cut
    a run of ties at another member), which must only be as long. Each
    build's own copy orders documents its own way."""
    if set(x) != set(y) or "hits" not in x:
        return x == y
    if any(x[k] != y[k] for k in x if k != "hits"):
        return False
    rx, ry = tie_runs(x["hits"]), tie_runs(y["hits"])
    if [(k, len(v)) for k, v in rx] != [(k, len(v)) for k, v in ry]:
        return False
    return all(sorted(a[1]) == sorted(b[1]) for a, b in zip(rx[:-1], ry[:-1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--port", type=int, default=0, help="default: a free one")
    ap.add_argument("--own-copies", action="store_true")
    ap.add_argument("--merged", action="store_true")
    ap.add_argument("--unmerged", action="store_true", help="with --own-copies: no force merge")
    ap.add_argument("--shards", type=int, default=2)
    a = ap.parse_args()
    if not a.port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            a.port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="shoal-ab-answers.")
    try:
        corpus, qfile = os.path.join(tmp, "w3.ndjson"), os.path.join(tmp, "q.ndjson")
        subprocess.run([sys.executable, os.path.join(HERE, "gen_w3.py"), str(a.n), "--seed", "42",
                        "--out", corpus], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(HERE, "gen_queries.py"), corpus, qfile,
                        "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
        queries = [json.loads(l) for l in open(qfile)]
        mapping = json.load(open(os.path.join(HERE, "w3_mapping.json")))
        lines = open(corpus).read().splitlines()

        def load(build, data):
            p = start(build, data, a.port)
            st, j = req(a.port, "PUT", "/w3", {"settings": {"number_of_shards": a.shards,
                                                            "number_of_replicas": 0},
                                                "mappings": mapping})
            assert st == 200, j
            for i in range(0, len(lines), 4000):
                bulk = "".join(json.dumps({"index": {"_index": "w3", "_id": json.loads(l)["id"]}})
                               + "\n" + l + "\n" for l in lines[i:i + 4000])
                st, j = req(a.port, "POST", "/_bulk", bulk.encode(), "application/x-ndjson")
                assert st == 200 and not j["errors"], str(j)[:300]
            req(a.port, "POST", "/w3/_refresh")
            if (a.own_copies and not a.unmerged) or a.merged:
                st, j = req(a.port, "POST", "/w3/_forcemerge?max_num_segments=1")
                assert st == 200, j
            return p

        res = {}
        p = None
        for tag, build in (("base", a.base), ("new", a.new)):
            data = os.path.join(tmp, "node-" + tag if a.own_copies else "node")
            if a.own_copies or tag == "base":
                p = load(build, data)
            else:
                p = start(build, data, a.port)
            res[tag] = answers(a.port, queries)
            stop(p)
            p = None
        same = same_ties_unordered if a.own_copies else (lambda x, y: x == y)
        bad = [(x, y) for x, y in zip(res["base"], res["new"]) if not same(x, y)]
        for x, y in bad[:10]:
            print("differs: %s\n  base %s\n  new  %s" % (x["class"], str(x)[:400], str(y)[:400]))
        print("%d answers compared (%d queries x 2), %d differ" % (len(res["base"]), len(queries), len(bad)))
        return 1 if bad else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
