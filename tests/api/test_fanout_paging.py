"""Pages over many shards: a node searching its shards hands each one still
to run the merge's worst kept hit, and a shard leaves out (neither fetches
nor sends) hits ranked after it (search/topk.c, sr_hit_bar). Whatever order
the shards finish in, every page must be exactly the slice of one big
ranking: pages of 7 concatenated equal one page of 70, for scored queries,
constant-score queries (all ties, ranked by shard then doc) and boosted
mixes, on a solo node and on a 3-node cluster (whose data nodes merge
their local shards the same way)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-fanout-paging-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "zeta"]


def load(n, index):
    st, b = n.req("PUT", "/" + index, {"settings": {"number_of_shards": 16, "number_of_replicas": 0}})
    eq(st, 200, "create %s: %s" % (index, b))
    lines = []
    for i in range(600):
        # varied lengths and repeats: distinct BM25 scores, and ties
        text = " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 2 + i % 7))
        lines.append({"index": {"_index": index, "_id": str(i)}})
        lines.append({"body": text, "n": i % 13, "tag": "t%d" % (i % 5)})
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk into " + index)


QUERIES = [
    {"match": {"body": "alpha gamma"}},
    {"match": {"body": "omega"}},
    {"constant_score": {"filter": {"term": {"tag": "t2"}}}},
    {"match_all": {}},
    {"bool": {"should": [{"match": {"body": "beta"}}, {"range": {"n": {"gte": 6, "boost": 2}}}]}},
]


def check(label, n, index):
    for q in QUERIES:
        st, big = n.req("POST", "/%s/_search" % index, {"query": q, "size": 70, "_source": False})
        eq(st, 200, label + " big page")
        want = [(h["_id"], h["_score"]) for h in big["hits"]["hits"]]
        got = []
        for frm in range(0, 70, 7):
            st, b = n.req("POST", "/%s/_search" % index,
                          {"query": q, "from": frm, "size": 7, "_source": frm % 14 == 0})
            eq(st, 200, label + " page")
            eq(b["hits"]["total"], big["hits"]["total"], label + " total on every page")
            eq(b["hits"]["max_score"], big["hits"]["max_score"], label + " max_score on every page")
            got += [(h["_id"], h["_score"]) for h in b["hits"]["hits"]]
        eq(got, want, "%s: pages of 7 are the big page's slices for %s" % (label, q))
        eq(len(want), 70, label + " 70 hits")


@test
def pages_are_slices_of_one_ranking_solo():
    n = solo()
    load(n, "fp")
    check("solo", n, "fp")


@test
def pages_are_slices_of_one_ranking_cluster():
    c = cluster()
    load(c["node-1"], "fpc")
    for name, n in c.items():
        check("cluster via " + name, n, "fpc")


if __name__ == "__main__":
    run_tests(budget_s=120, teardown=teardown)
