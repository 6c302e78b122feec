"""Pages over many shards: a node searching its shards hands each one still
to run the merge's worst kept hit, and a shard leaves out (neither fetches
nor sends) hits ranked after it (search/topk.c, sr_hit_bar). Whatever order
the shards finish in, every page must be exactly the slice of one big
ranking: pages of 7 concatenated equal one page of 70, for scored queries,
constant-score queries (all ties, ranked by shard then doc) and boosted
mixes, on a solo node and on a 3-node cluster (whose data nodes merge
their local shards the same way). Also: field sorts that skip whole
column blocks once the top 10 is full still answer as the model."""
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


def load_sorted(n, index, shards):
    """12,000 docs over several 4,096-doc column blocks per shard: unique
    values (a permutation), some docs multi-valued, some without n."""
    import random
    rnd = random.Random(11)
    vals = list(range(30000))
    rnd.shuffle(vals)
    docs, lines, at = {}, [], 0
    for i in range(12000):
        k = 0 if i % 17 == 0 else (2 if i % 5 == 0 else 1)
        v = vals[at:at + k]
        at += k
        docs[str(i)] = v
        lines.append({"index": {"_index": index, "_id": str(i)}})
        lines.append({"n": v if len(v) != 1 else v[0], "g": i % 3})
    st, b = n.req("PUT", "/" + index, {"settings": {"number_of_shards": shards, "number_of_replicas": 0},
                                       "mappings": {"properties": {"n": {"type": "long"}}}})
    eq(st, 200, "create %s: %s" % (index, b))
    for k in range(0, len(lines), 6000):
        st, b = n.bulk(lines[k:k + 6000])
        eq((st, b.get("errors")), (200, False), "bulk into " + index)
    st, b = n.req("POST", "/%s/_forcemerge?max_num_segments=1" % index)
    eq(st, 200, "force merge " + index)
    n.refresh(index)
    return docs


def check_sorts(label, n, index, docs):
    """Whole column blocks are skipped once the top 10 is full (topk.c,
    window_beyond_worst): the answers must still be the model's."""
    for order, mode in (("asc", None), ("desc", None), ("asc", "max"), ("desc", "min"), ("asc", "avg")):
        def key(v):
            if mode == "max" or (mode is None and order == "desc"):
                return max(v)
            if mode == "avg":
                return sum(v) / len(v)
            return min(v)
        valued = sorted((d for d in docs if docs[d]), key=lambda d: key(docs[d]), reverse=order == "desc")
        sort = {"n": {"order": order}}
        if mode:
            sort["n"]["mode"] = mode
        for q in ({"match_all": {}}, {"term": {"g": 1}}):
            want = [d for d in valued if q.get("term") is None or int(d) % 3 == 1][:10]
            st, b = n.req("POST", "/%s/_search" % index,
                          {"query": q, "sort": [sort], "size": 10, "track_total_hits": False,
                           "_source": False})
            eq(st, 200, label + " sort")
            eq([h["_id"] for h in b["hits"]["hits"]], want, "%s: top 10 by %s over %s" % (label, sort, q))


@test
def field_sorts_skip_blocks_solo():
    n = solo()
    docs = load_sorted(n, "fs", 1)
    check_sorts("solo", n, "fs", docs)


@test
def field_sorts_skip_blocks_cluster():
    c = cluster()
    docs = load_sorted(c["node-1"], "fsc", 2)
    check_sorts("cluster", c["node-2"], "fsc", docs)


if __name__ == "__main__":
    run_tests(budget_s=120, teardown=teardown)
