"""Terms aggregations on one shard are exact: buckets, their order (count
descending, then key), sum_other_doc_count and doc_count_error_upper_bound
against counts worked out here, for a keyword field with 20,000 terms and a
multi-valued one, over filters from a few docs to most of them, before and
after a force merge to one segment. The engine counts a filtered set's
ordinals in a small table and, on a shard's only segment, looks up only
the top shard_size ordinals' terms: this checks that such shortcuts change
nothing (ES semantics on one shard: buckets below min_doc_count are not
counted in sum_other_doc_count)."""
import os
import random
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node, eq, run_tests, test  # noqa: E402

N = 30000
DOCS = []
NODE = None


def node():
    global NODE
    if NODE is None:
        NODE = Node()
        rnd = random.Random(5)
        for i in range(N):
            DOCS.append({"k": "t%05d" % int(rnd.paretovariate(1.2) * 3 % 20000),
                         "f": rnd.randrange(1000),
                         "m": ["x%04d" % rnd.randrange(5000) for _ in range(rnd.randrange(3))]})
        st, b = NODE.req("PUT", "/a", {
            "settings": {"number_of_shards": 1, "number_of_replicas": 0},
            "mappings": {"properties": {"k": {"type": "keyword"}, "f": {"type": "integer"},
                                        "m": {"type": "keyword"}}}})
        eq(st, 200, "create: %s" % b)
        for lo in range(0, N, 10000):
            lines = []
            for i in range(lo, min(N, lo + 10000)):
                lines += [{"index": {"_index": "a", "_id": str(i)}}, DOCS[i]]
            st, b = NODE.bulk(lines, params="?refresh=true")
            eq((st, b.get("errors")), (200, False), "bulk")
    return NODE


def expected(field, lim, size, min_doc_count, key_order):
    c = Counter()
    for d in DOCS:
        if d["f"] < lim:
            v = d[field]
            for t in set(v if isinstance(v, list) else [v]):
                c[t] += 1
    rows = [(t, n) for t, n in c.items() if n >= min_doc_count]
    rows.sort(key=(lambda r: r[0]) if key_order else (lambda r: (-r[1], r[0])))
    top = rows[:size]
    return {"doc_count_error_upper_bound": 0,
            "sum_other_doc_count": sum(n for _, n in rows[size:]),
            "buckets": [{"key": t, "doc_count": n} for t, n in top]}


def check_all(label):
    n = node()
    bad = 0
    for lim in (1, 5, 30, 300, 1000):
        for field in ("k", "m"):
            for size in (1, 3, 10, 50):
                for extra in ({}, {"shard_size": size}, {"min_doc_count": 2},
                              {"order": {"_key": "asc"}}):
                    body = {"size": 0, "query": {"range": {"f": {"lt": lim}}},
                            "aggs": {"t": {"terms": dict({"field": field, "size": size}, **extra)}}}
                    st, b = n.req("POST", "/a/_search", body)
                    eq(st, 200, "search: %s" % b)
                    want = expected(field, lim, size, extra.get("min_doc_count", 1),
                                    "order" in extra)
                    got = b["aggregations"]["t"]
                    if got != want and bad < 3:
                        print("  %s: %s\n    got  %s\n    want %s" % (label, body, str(got)[:300],
                                                                   str(want)[:300]))
                    bad += got != want
    eq(bad, 0, "%s: aggregations that differ from the counts" % label)


@test
def several_segments():
    node()
    check_all("before the force merge")


@test
def one_segment():
    st, b = node().req("POST", "/a/_forcemerge?max_num_segments=1")
    eq(st, 200, "force merge: %s" % b)
    check_all("one segment")


def teardown():
    """Stops the node (it used to outlive the run), returning its exit code."""
    return NODE.stop() if NODE is not None else 0


if __name__ == "__main__":
    run_tests(teardown=teardown)
