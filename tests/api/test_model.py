"""Random documents and random queries of every family compared with a
Python model: totals, sorted ids with pagination, aggregations, on an index
with 1 shard and one with 3 shards (after deletes and overwrites)."""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node, eq, run_tests, test  # noqa: E402

SEED = int(os.environ.get("SHOAL_MODEL_SEED", "20261130"))
NDOCS = 400
NQUERIES = 150
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet"]
KWS = ["red", "green", "blue", "cyan", "black", "dark-red", "ember"]
TAGS = ["t1", "t2", "t3", "t4"]
MAPPING = {"properties": {"seq": {"type": "long"}, "kw": {"type": "keyword"},
                          "num": {"type": "long"}, "price": {"type": "double"},
                          "txt": {"type": "text"}, "flag": {"type": "boolean"},
                          "tags": {"type": "keyword"}}}

N = None


def node():
    global N
    if N is None:
        N = Node()
    return N


def rand_doc(rng, seq):
    d = {"seq": seq, "kw": rng.choice(KWS), "price": round(rng.uniform(0, 100), 2),
         "txt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))),
         "flag": rng.random() < 0.5,
         "tags": rng.sample(TAGS, rng.randint(0, 3))}
    if rng.random() < 0.9:
        d["num"] = rng.randrange(100)
    return d


def words(d):
    return set(d["txt"].split())


def rand_query(rng):
    """Returns (ES query, model predicate)."""
    kind = rng.randrange(16)
    if kind == 0:
        k = rng.choice(KWS)
        return {"term": {"kw": k}}, lambda d: d["kw"] == k
    if kind == 1:
        ks = rng.sample(KWS, 2)
        return {"terms": {"kw": ks}}, lambda d: d["kw"] in ks
    if kind == 2:
        lo, hi = sorted(rng.sample(range(100), 2))
        return ({"range": {"num": {"gte": lo, "lt": hi}}},
                lambda d: "num" in d and lo <= d["num"] < hi)
    if kind == 3:
        w = rng.choice(WORDS)
        return {"match": {"txt": w}}, lambda d: w in words(d)
    if kind == 4:
        a, b = rng.sample(WORDS, 2)
        op = rng.choice(["and", "or"])
        q = {"match": {"txt": {"query": "%s %s" % (a.upper(), b), "operator": op}}}
        if op == "and":
            return q, lambda d: a in words(d) and b in words(d)
        return q, lambda d: a in words(d) or b in words(d)
    if kind == 5:
        w, k = rng.choice(WORDS), rng.choice(KWS)
        lo = rng.randrange(80)
        return ({"bool": {"must": [{"match": {"txt": w}}],
                          "filter": [{"range": {"num": {"gte": lo}}}],
                          "must_not": [{"term": {"kw": k}}]}},
                lambda d: w in words(d) and d.get("num", -1) >= lo and d["kw"] != k)
    if kind == 6:
        a, b = rng.sample(KWS, 2)
        w = rng.choice(WORDS)
        return ({"bool": {"should": [{"term": {"kw": a}}, {"term": {"kw": b}},
                                     {"match": {"txt": w}}],
                          "minimum_should_match": 2}},
                lambda d: (d["kw"] == a) + (d["kw"] == b) + (w in words(d)) >= 2)
    if kind == 7:
        return {"exists": {"field": "num"}}, lambda d: "num" in d
    if kind == 8:
        p = rng.choice(["bl", "re", "d", "e", "gr"])
        return {"prefix": {"kw": p}}, lambda d: d["kw"].startswith(p)
    if kind == 9:
        c = rng.choice("aeiou")
        return {"wildcard": {"kw": "*%s*" % c}}, lambda d: c in d["kw"]
    if kind == 10:
        ids = [str(rng.randrange(NDOCS)) for _ in range(8)]
        return {"ids": {"values": ids}}, lambda d: d["_id"] in ids
    if kind == 11:
        return {"match_all": {}}, lambda d: True
    if kind == 12:
        ts = rng.sample(TAGS, 2)
        return {"terms": {"tags": ts}}, lambda d: any(t in d["tags"] for t in ts)
    if kind == 13:
        f = rng.random() < 0.5
        return {"term": {"flag": f}}, lambda d: d["flag"] == f
    if kind == 14:
        lo = round(rng.uniform(0, 90), 2)
        return ({"bool": {"filter": [{"range": {"price": {"gt": lo, "lte": lo + 20}}}],
                          "must_not": [{"exists": {"field": "num"}}]}},
                lambda d: lo < d["price"] <= lo + 20 and "num" not in d)
    a, b = rng.sample(WORDS, 2)
    k = rng.choice(KWS)
    return ({"query_string": {"query": "txt:%s OR (txt:%s AND NOT kw:%s)" % (a, b, k)}},
            lambda d: a in words(d) or (b in words(d) and d["kw"] != k))


def load(n, index, shards, rng):
    n.req("DELETE", "/" + index)
    st, b = n.req("PUT", "/" + index, {"settings": {"number_of_shards": shards,
                                                    "number_of_replicas": 0,
                                                    "refresh_interval": "-1"},
                                       "mappings": MAPPING})
    assert st == 200, b
    docs = {}
    lines = []
    for i in range(NDOCS):
        d = rand_doc(rng, i)
        docs[str(i)] = d
        lines += [{"index": {"_id": str(i)}}, d]
    st, b = n.bulk(lines, "/%s/_bulk" % index)
    assert st == 200 and not b["errors"], b
    n.refresh(index)  # a first segment, so deletes and overwrites cross segments
    lines = []
    for i in rng.sample(range(NDOCS), NDOCS // 5):
        if rng.random() < 0.5:
            lines.append({"delete": {"_id": str(i)}})
            docs.pop(str(i), None)
        else:
            d = rand_doc(rng, i)
            docs[str(i)] = d
            lines += [{"index": {"_id": str(i)}}, d]
    st, b = n.bulk(lines, "/%s/_bulk" % index)
    assert st == 200 and not b["errors"], b
    n.refresh(index)
    for k, d in docs.items():
        d["_id"] = k
    return docs


def check_queries(index, shards):
    n = node()
    rng = random.Random(SEED + shards)
    docs = load(n, index, shards, rng)
    eq(n.req("GET", "/%s/_count" % index)[1]["count"], len(docs), "count after load")
    for qi in range(NQUERIES):
        q, pred = rand_query(rng)
        expect = sorted((d for d in docs.values() if pred(d)), key=lambda d: d["seq"])
        desc = rng.random() < 0.3
        if desc:
            expect.reverse()
        size = rng.choice([1, 5, 10, 50])
        frm = rng.choice([0, 0, 3, 17])
        body = {"query": q, "sort": [{"seq": "desc" if desc else "asc"}], "from": frm,
                "size": size, "track_total_hits": True, "_source": False}
        st, b = n.req("POST", "/%s/_search" % index, body)
        what = "query %d %s" % (qi, q)
        eq(st, 200, what + " status: %s" % (b,))
        eq(b["hits"]["total"], {"value": len(expect), "relation": "eq"}, what + " total")
        eq([h["_id"] for h in b["hits"]["hits"]], [d["_id"] for d in expect[frm:frm + size]],
           what + " ids")
        st, c = n.req("POST", "/%s/_count" % index, {"query": q})
        eq(c["count"], len(expect), what + " _count")


def check_aggs(index, shards):
    n = node()
    rng = random.Random(SEED + 100 + shards)
    docs = load(n, index, shards, rng)
    for qi in range(8):
        q, pred = rand_query(rng)
        sel = [d for d in docs.values() if pred(d)]
        nums = [d["num"] for d in sel if "num" in d]
        body = {"size": 0, "query": q, "aggs": {
            "kws": {"terms": {"field": "kw", "size": 20}},
            "tags": {"terms": {"field": "tags", "size": 20}},
            "s": {"sum": {"field": "num"}}, "mn": {"min": {"field": "num"}},
            "mx": {"max": {"field": "num"}}, "av": {"avg": {"field": "num"}},
            "vc": {"value_count": {"field": "num"}},
            "h": {"histogram": {"field": "num", "interval": 25}},
            "r": {"range": {"field": "price", "ranges": [{"to": 50}, {"from": 50}]}},
            "by_flag": {"terms": {"field": "flag"}, "aggs": {"p": {"max": {"field": "price"}}}}}}
        st, b = n.req("POST", "/%s/_search" % index, body)
        what = "aggs %d %s" % (qi, q)
        eq(st, 200, what + " %s" % (b,))
        a = b["aggregations"]
        kw_counts = {}
        for d in sel:
            kw_counts[d["kw"]] = kw_counts.get(d["kw"], 0) + 1
        got = [(x["key"], x["doc_count"]) for x in a["kws"]["buckets"]]
        eq(dict(got), kw_counts, what + " terms")
        eq(got, sorted(got, key=lambda kv: (-kv[1], kv[0])), what + " terms order")
        tag_counts = {}
        for d in sel:
            for t in d["tags"]:
                tag_counts[t] = tag_counts.get(t, 0) + 1
        eq({x["key"]: x["doc_count"] for x in a["tags"]["buckets"]}, tag_counts, what + " tags")
        eq(a["s"]["value"], float(sum(nums)), what + " sum")
        eq(a["vc"]["value"], len(nums), what + " value_count")
        if nums:
            eq(a["mn"]["value"], float(min(nums)), what + " min")
            eq(a["mx"]["value"], float(max(nums)), what + " max")
            assert abs(a["av"]["value"] - sum(nums) / len(nums)) < 1e-9, (what, a["av"])
        else:
            eq((a["mn"]["value"], a["mx"]["value"], a["av"]["value"]), (None, None, None), what)
        hist = {}
        for v in nums:
            hist[float(v // 25 * 25)] = hist.get(float(v // 25 * 25), 0) + 1
        gh = {x["key"]: x["doc_count"] for x in a["h"]["buckets"] if x["doc_count"]}
        eq(gh, hist, what + " histogram")
        rb = a["r"]["buckets"]
        eq([x["doc_count"] for x in rb],
           [sum(1 for d in sel if d["price"] < 50), sum(1 for d in sel if d["price"] >= 50)],
           what + " range")
        for bk in a["by_flag"]["buckets"]:
            f = bk["key"] == 1
            ps = [d["price"] for d in sel if d["flag"] == f]
            eq(bk["doc_count"], len(ps), what + " flag count")
            assert abs(bk["p"]["value"] - max(ps)) < 1e-9, (what, bk)


@test
def model_queries_1_shard():
    check_queries("model1", 1)


@test
def model_queries_3_shards():
    check_queries("model3", 3)


@test
def model_aggs_1_shard():
    check_aggs("modelagg1", 1)


@test
def model_aggs_3_shards():
    check_aggs("modelagg3", 3)


@test
def model_search_after_walk_3_shards():
    """Walk every match with search_after in pages; same ids as the model."""
    n = node()
    rng = random.Random(SEED + 7)
    docs = load(n, "modelsa", 3, rng)
    for _ in range(5):
        q, pred = rand_query(rng)
        expect = [d["_id"] for d in sorted((d for d in docs.values() if pred(d)),
                                           key=lambda d: d["seq"])]
        got, after = [], None
        for _ in range(200):
            body = {"query": q, "sort": [{"seq": "asc"}], "size": 7, "_source": False}
            if after is not None:
                body["search_after"] = after
            b = n.req("POST", "/modelsa/_search", body)[1]
            hits = b["hits"]["hits"]
            if not hits:
                break
            got += [h["_id"] for h in hits]
            after = hits[-1]["sort"]
        eq(got, expect, "search_after walk %s" % q)


if __name__ == "__main__":
    print("seed %d" % SEED)
    run_tests(budget_s=110, teardown=lambda: N.cleanup() if N else None)
