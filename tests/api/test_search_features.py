"""Search body features of issue 13 on a solo node and a 3-node static
cluster: post_filter, min_score, rescore (every score_mode, arrays of
rescorers, the per-shard window), collapse (best hit per value across
shards, inner_hits), indices_boost (object and array forms, aliases,
patterns, first match wins), profile (per-shard timings in ES's shape)
and search templates (inline, stored, _render, _msearch), each checked
against expectations computed here from plain searches or by hand, and
their Elasticsearch-shaped 400s."""
import math
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-search-features-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown
WORDS = ["foo", "bar", "baz", "qux"]
GROUPS = ["red", "green", "blue", "gold", "grey"]


def targets():
    """(label, node to write through, nodes to ask)."""
    c = cluster()
    return [("solo", solo(), [solo()]), ("cluster", c["node-1"], list(c.values()))]


def make_docs(seed, count):
    rnd = random.Random(seed)
    docs = []
    for i in range(count):
        words = [rnd.choice(WORDS) for _ in range(rnd.randint(1, 6))]
        docs.append({"t": " ".join(words), "g": GROUPS[rnd.randrange(len(GROUPS))],
                     "n": i, "k": rnd.randrange(4)})
    return docs


DOCS = make_docs(13, 60)
PROPS = {"t": {"type": "text"}, "g": {"type": "keyword"}, "n": {"type": "integer"},
         "k": {"type": "long"}, "d": {"type": "date"}}


def make_index(n, name, docs, shards=3):
    st, b = n.req("PUT", "/" + name, {
        "settings": {"number_of_shards": shards, "number_of_replicas": 0},
        "mappings": {"properties": PROPS}})
    eq(st, 200, "create %s: %s" % (name, b))
    lines = []
    for i, d in enumerate(docs):
        lines += [{"index": {"_index": name, "_id": str(i)}}, d]
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk into %s: %s" % (name, b))


def search(n, index, body, path="_search"):
    st, b = n.req("POST", "/%s/%s" % (index, path), body)
    eq(st, 200, "search %s %s: %s" % (index, body, b))
    return b


def scores(n, index, query):
    """{id: score} of every doc the query matches."""
    b = search(n, index, {"query": query, "size": 1000, "_source": False})
    return {h["_id"]: h["_score"] for h in b["hits"]["hits"]}


def close(a, b, what):
    if not math.isclose(a, b, rel_tol=2e-6, abs_tol=1e-6):
        raise AssertionError("%s: expected %r, got %r" % (what, b, a))


def has(d, word):
    return word in d["t"].split()


_made = set()


def index_for(label, w, name="sf", docs=DOCS, shards=3):
    full = "%s-%s" % (name, label)
    if full not in _made:
        make_index(w, full, docs, shards)
        _made.add(full)
    return full


# ---- post_filter ----

@test
def post_filter_narrows_hits_not_aggs():
    for label, w, asks in targets():
        ix = index_for(label, w)
        matching = [d for d in DOCS if has(d, "foo")]
        want_aggs = {}
        for d in matching:
            want_aggs[d["g"]] = want_aggs.get(d["g"], 0) + 1
        want_ids = sorted(str(d["n"]) for d in matching if d["g"] == "red")
        for n in asks:
            b = search(n, ix, {"query": {"match": {"t": "foo"}},
                               "post_filter": {"term": {"g": "red"}},
                               "aggs": {"g": {"terms": {"field": "g", "size": 10}}},
                               "size": 100, "_source": False})
            eq(b["hits"]["total"], {"value": len(want_ids), "relation": "eq"}, label)
            eq(sorted(h["_id"] for h in b["hits"]["hits"]), want_ids, label)
            eq({x["key"]: x["doc_count"] for x in b["aggregations"]["g"]["buckets"]},
               want_aggs, label)
            # the hits keep the query's scores
            s = scores(n, ix, {"match": {"t": "foo"}})
            for h in b["hits"]["hits"]:
                close(h["_score"], s[h["_id"]], label)
            # size 0: the total alone still honours post_filter
            b = search(n, ix, {"query": {"match": {"t": "foo"}}, "size": 0,
                               "post_filter": {"range": {"n": {"lt": 30}}},
                               "track_total_hits": True})
            eq(b["hits"]["total"]["value"], sum(1 for d in matching if d["n"] < 30), label)
        error_is(w.req("POST", "/%s/_search" % ix, {"post_filter": "red"}), 400,
                 "parsing_exception")
        error_is(w.req("POST", "/%s/_search" % ix, {"post_filter": {"nope": {}}}), 400,
                 "parsing_exception")


# ---- min_score ----

@test
def min_score_drops_low_scores_everywhere():
    for label, w, asks in targets():
        ix = index_for(label, w)
        q = {"match": {"t": "foo bar"}}
        for n in asks:
            s = scores(n, ix, q)
            cut = sorted(s.values())[len(s) // 2]
            keep = sorted(i for i, v in s.items() if v >= cut)
            b = search(n, ix, {"query": q, "min_score": cut, "size": 100, "_source": False,
                               "aggs": {"c": {"value_count": {"field": "n"}}}})
            eq(sorted(h["_id"] for h in b["hits"]["hits"]), keep, label)
            eq(b["hits"]["total"]["value"], len(keep), label)
            eq(b["aggregations"]["c"]["value"], len(keep), label)
            # _count?min_score= counts the same documents
            st, c = n.req("POST", "/%s/_count?min_score=%r" % (ix, cut), {"query": q})
            eq((st, c["count"], c["_shards"]["total"]), (200, len(keep), 3), "%s %s" % (label, c))
            # a numeric string is a float too; sorting by a field still scores
            b = search(n, ix, {"query": q, "min_score": str(cut), "size": 100,
                               "sort": [{"n": "asc"}], "_source": False})
            eq([h["_id"] for h in b["hits"]["hits"]], sorted(keep, key=int), label)
        error_is(w.req("POST", "/%s/_search" % ix, {"min_score": "high"}), 400,
                 "x_content_parse_exception")
        error_is(w.req("POST", "/%s/_search" % ix, {"min_score": [1]}), 400,
                 "x_content_parse_exception")
        error_is(w.req("POST", "/%s/_count?min_score=x" % ix, {}), 400,
                 "illegal_argument_exception")


# ---- rescore ----

def combine(mode, first, matched, second, qw, rw):
    p = first * qw
    if not matched:
        return p
    q = second * rw
    return {"total": p + q, "multiply": p * q, "avg": (p + q) / 2,
            "max": max(p, q), "min": min(p, q)}[mode]


@test
def rescore_every_score_mode():
    for label, w, asks in targets():
        ix = index_for(label, w)
        q, rq = {"match": {"t": "foo baz"}}, {"match": {"t": "bar"}}
        for i, n in enumerate(asks):
            s, r = scores(n, ix, q), scores(n, ix, rq)
            modes = ["total", "multiply", "avg", "max", "min"]
            if len(asks) > 1:
                modes = modes[i::len(asks)] + ["multiply"]
            for mode in modes:
                qw, rw = 0.7, 1.9
                b = search(n, ix, {"query": q, "size": 100, "_source": False, "rescore": {
                    "window_size": 100, "query": {
                        "rescore_query": rq, "query_weight": qw,
                        "rescore_query_weight": rw, "score_mode": mode}}})
                want = {d: combine(mode, v, d in r, r.get(d, 0), qw, rw) for d, v in s.items()}
                got = {h["_id"]: h["_score"] for h in b["hits"]["hits"]}
                eq(sorted(got), sorted(want), label + " " + mode)
                for d in got:
                    close(got[d], want[d], "%s %s doc %s" % (label, mode, d))
                ranked = [h["_score"] for h in b["hits"]["hits"]]
                eq(ranked, sorted(ranked, reverse=True), label + " ranked " + mode)
                if label == "cluster" and mode == "multiply":
                    pn = search(n, ix, {"query": q, "size": 100, "_source": False, "rescore": {
                        "window_size": 100, "query": {
                            "rescore_query": rq, "query_weight": qw,
                            "rescore_query_weight": rw, "score_mode": mode}}},
                        path="_search?fanout=per_node")
                    eq(pn["hits"], b["hits"], label + " per_node")
                close(b["hits"]["max_score"], ranked[0], label + " max_score " + mode)
                eq(b["hits"]["total"]["value"], len(s), label)


@test
def rescore_array_applies_in_order():
    for label, w, asks in targets():
        ix = index_for(label, w)
        q, r1, r2 = {"match": {"t": "qux"}}, {"match": {"t": "foo"}}, {"term": {"g": "red"}}
        n = asks[-1]
        s, a, c = scores(n, ix, q), scores(n, ix, r1), scores(n, ix, r2)
        b = search(n, ix, {"query": q, "size": 100, "_source": False, "rescore": [
            {"window_size": 100, "query": {"rescore_query": r1, "score_mode": "multiply"}},
            {"window_size": 100, "query": {"rescore_query": r2, "query_weight": 2,
                                           "score_mode": "total"}}]})
        for h in b["hits"]["hits"]:
            d = h["_id"]
            one = combine("multiply", s[d], d in a, a.get(d, 0), 1, 1)
            close(h["_score"], combine("total", one, d in c, c.get(d, 0), 2, 1), label + d)


@test
def rescore_window_is_per_shard_top():
    # one shard: only its top window_size hits are rescored
    for label, w, asks in targets():
        ix = index_for(label, w, name="rs1", shards=1)
        q, rq = {"match": {"t": "foo"}}, {"match": {"t": "qux"}}
        for n in asks:
            s, r = scores(n, ix, q), scores(n, ix, rq)
            order = sorted(s, key=lambda d: (-s[d], int(d)))
            top = order[:3]
            want = {d: combine("total", s[d], d in r, r.get(d, 0), 1, 10) for d in top}
            b = search(n, ix, {"query": q, "size": 8, "_source": False, "rescore": {
                "window_size": 3, "query": {"rescore_query": rq, "rescore_query_weight": 10}}})
            got = [(h["_id"], h["_score"]) for h in b["hits"]["hits"]]
            eq(sorted(d for d, _ in got[:3]), sorted(top), label + " window docs first")
            for d, v in got[:3]:
                close(v, want[d], label + " rescored " + d)
            for d, v in got[3:]:
                close(v, s[d], label + " outside the window " + d)
            eq([d for d, _ in got[3:]], order[3:8], label + " the rest in query order")
            # window_size 0 rescores nothing
            b = search(n, ix, {"query": q, "size": 5, "_source": False, "rescore": {
                "window_size": 0, "query": {"rescore_query": rq, "rescore_query_weight": 10}}})
            eq([h["_id"] for h in b["hits"]["hits"]], order[:5], label)


@test
def rescore_errors():
    for label, w, asks in targets():
        ix = index_for(label, w)
        p = "/%s/_search" % ix
        rq = {"match": {"t": "foo"}}
        error_is(w.req("POST", p, {"rescore": {"query": {"rescore_query": rq,
                                                         "score_mode": "sum"}}}),
                 400, "illegal_argument_exception", "illegal score_mode [sum]")
        error_is(w.req("POST", p, {"rescore": {"query": {"rescore_query": rq, "boost": 2}}}),
                 400, "x_content_parse_exception", "[query] unknown field [boost]")
        error_is(w.req("POST", p, {"rescore": {"query": {"query_weight": 2}}}),
                 400, "illegal_argument_exception", "rescore_query cannot be null")
        error_is(w.req("POST", p, {"rescore": {"window_size": 5}}), 400, "parsing_exception")
        error_is(w.req("POST", p, {"rescore": {"query": {"rescore_query": rq,
                                                         "query_weight": "x"}}}),
                 400, "x_content_parse_exception")
        error_is(w.req("POST", p, {"rescore": {"learning_to_rank": {}}}), 400,
                 "x_content_parse_exception")
        error_is(w.req("POST", p, {"rescore": {"window_size": -1, "query": {
            "rescore_query": rq}}}), 400, "illegal_argument_exception")
        error_is(w.req("POST", p, {"rescore": {"window_size": 20000, "query": {
            "rescore_query": rq}}}), 400, "illegal_argument_exception", "Rescore window")
        error_is(w.req("POST", p, {"sort": ["n"], "rescore": {"query": {"rescore_query": rq}}}),
                 400, "illegal_argument_exception",
                 "Cannot use [sort] option in conjunction with [rescore].")
        error_is(w.req("POST", p + "?scroll=1m", {"rescore": {"query": {"rescore_query": rq}}}),
                 400, "action_request_validation_exception")
        # sorting by _score alone is allowed
        st, b = w.req("POST", p, {"sort": ["_score"], "rescore": {"query": {"rescore_query": rq}}})
        eq(st, 200, b)


# ---- collapse ----

@test
def collapse_keeps_the_best_per_value_across_shards():
    for label, w, asks in targets():
        ix = index_for(label, w)
        q = {"match": {"t": "foo bar baz"}}
        for n in asks:
            s = scores(n, ix, q)
            best = {}
            for d in DOCS:
                i = str(d["n"])
                if i in s and (d["g"] not in best or s[i] > best[d["g"]]):
                    best[d["g"]] = s[i]
            body = {"query": q, "collapse": {"field": "g"}, "size": 10, "_source": False}
            b = search(n, ix, body)
            if label == "cluster":  # merged per node first, then on the coordinator
                eq(search(n, ix, body, path="_search?fanout=per_node")["hits"], b["hits"], label)
            eq(b["hits"]["total"]["value"], len(s), label + " total counts docs")
            got = {h["fields"]["g"][0]: h["_score"] for h in b["hits"]["hits"]}
            eq(sorted(got), sorted(best), label)
            for g in got:
                close(got[g], best[g], label + " best of " + g)
            for h in b["hits"]["hits"]:
                eq(DOCS[int(h["_id"])]["g"], h["fields"]["g"][0], label)
            # by a sort: the greatest n per numeric k, with from/size paging the groups
            want = sorted(({d["k"]: d["n"] for d in sorted(DOCS, key=lambda d: d["n"])}).items(),
                          key=lambda kv: -kv[1])
            b = search(n, ix, {"collapse": {"field": "k"}, "sort": [{"n": "desc"}],
                               "size": 2, "from": 1})
            eq([(h["fields"]["k"][0], h["_source"]["n"]) for h in b["hits"]["hits"]],
               want[1:3], label)
            eq([h["sort"] for h in b["hits"]["hits"]], [[v] for _, v in want[1:3]], label)


@test
def collapse_inner_hits():
    for label, w, asks in targets():
        ix = index_for(label, w)
        n = asks[0]
        b = search(n, ix, {"query": {"range": {"n": {"gte": 10}}},
                           "collapse": {"field": "g", "inner_hits": [
                               {"name": "low", "size": 2, "sort": [{"n": "asc"}]},
                               {"name": "high", "size": 1, "from": 1, "sort": [{"n": "desc"}],
                                "_source": ["n"]}]},
                           "sort": [{"n": "desc"}], "size": 10})
        groups = {}
        for d in DOCS:
            if d["n"] >= 10:
                groups.setdefault(d["g"], []).append(d["n"])
        eq(len(b["hits"]["hits"]), len(groups), label)
        for h in b["hits"]["hits"]:
            g = h["fields"]["g"][0]
            ns = sorted(groups[g])
            eq(h["_source"]["n"], ns[-1], label)
            low = h["inner_hits"]["low"]["hits"]
            eq(low["total"], {"value": len(ns), "relation": "eq"}, label)
            eq([x["_source"]["n"] for x in low["hits"]], ns[:2], label + " low " + g)
            high = h["inner_hits"]["high"]["hits"]["hits"]
            eq([x["_source"] for x in high], [{"n": v} for v in ns[::-1][1:2]], label)
        # the response is edited, not re-serialized: _source keeps its bytes
        st, _, raw = n.raw("POST", "/%s/_search" % ix, {"collapse": {"field": "g", "inner_hits": {
            "name": "x", "size": 1, "sort": ["n"]}}, "size": 1, "sort": [{"n": "asc"}],
            "profile": True})
        eq(st, 200, raw)
        want = __import__("json").dumps(DOCS[min(d["n"] for d in DOCS if d["g"] == DOCS[0]["g"])])
        if raw.count(want.encode()) != 2:
            raise AssertionError("%s: _source %s not kept as sent in %s" % (label, want, raw[:600]))
        # values past 2^53 stay distinct groups, exact (long and unsigned_long)
        big = "cbig-" + label
        st, r = w.req("PUT", "/" + big, {"settings": {"number_of_shards": 3,
                                                      "number_of_replicas": 0},
                                         "mappings": {"properties": {
                                             "l": {"type": "long"},
                                             "u": {"type": "unsigned_long"},
                                             "n": {"type": "integer"}}}})
        eq(st, 200, r)
        vals = [2 ** 60, 2 ** 60 + 1, 2 ** 60 + 1, 2 ** 60]
        lines = []
        for i, v in enumerate(vals):
            lines += [{"index": {"_index": big, "_id": str(i)}},
                      {"l": v, "u": 2 ** 63 + 5 + (i % 2), "n": i}]
        eq(w.bulk(lines, params="?refresh=true")[0], 200, label)
        for f, want in (("l", ['[%d]' % 2 ** 60, '[%d]' % (2 ** 60 + 1)]),
                        ("u", ['[%d]' % (2 ** 63 + 6), '[%d]' % (2 ** 63 + 5)])):
            st, _, raw = n.raw("POST", "/%s/_search" % big, {
                "collapse": {"field": f}, "sort": [{"n": "desc"}], "_source": False,
                "fields": ["n"]})
            got = re.findall(r'"fields":\{"%s":(\[[0-9]+\]),"n":\[\d\]\}' % f, raw.decode())
            eq(got, want, "%s %s %s" % (label, f, raw[:400]))
        # a missing value is a group of its own
        extra = "cnull-" + label
        make_index(w, extra, [{"g": "a", "n": 1}, {"n": 2}, {"n": 3}, {"g": "a", "n": 4}])
        b = search(n, extra, {"collapse": {"field": "g", "inner_hits": {"name": "all"}},
                              "sort": [{"n": "desc"}]})
        eq([(h["_id"], h["fields"]["g"]) for h in b["hits"]["hits"]],
           [("3", ["a"]), ("2", [None])], label)
        eq(sorted(x["_id"] for x in b["hits"]["hits"][1]["inner_hits"]["all"]["hits"]["hits"]),
           ["1", "2"], label)


@test
def collapse_errors():
    for label, w, asks in targets():
        ix = index_for(label, w)
        p = "/%s/_search" % ix
        error_is(w.req("POST", p, {"collapse": {"field": "t"}}), 400,
                 "illegal_argument_exception",
                 "unknown type for collapse field `t`, only keywords and numbers are accepted")
        error_is(w.req("POST", p, {"collapse": {"field": "d"}}), 400,
                 "illegal_argument_exception", "unknown type for collapse field `d`")
        error_is(w.req("POST", p, {"collapse": {"field": "nope"}}), 400,
                 "illegal_argument_exception", "no mapping found for `nope`")
        error_is(w.req("POST", p, {"collapse": {"field": "g", "size": 3}}), 400,
                 "x_content_parse_exception", "[collapse] unknown field [size]")
        error_is(w.req("POST", p, {"collapse": {}}), 400, "illegal_argument_exception")
        error_is(w.req("POST", p, {"collapse": {"field": "g", "inner_hits": {"nme": "x"}}}), 400,
                 "x_content_parse_exception", "[inner_hits] unknown field [nme]")
        error_is(w.req("POST", p, {"collapse": {"field": "g", "inner_hits": [
            {"name": "x"}, {"name": "x"}]}}), 400, "illegal_argument_exception", "[x]")
        error_is(w.req("POST", p, {"collapse": {"field": "g", "inner_hits": {
            "name": "big", "from": 60, "size": 41}}}), 400, "illegal_argument_exception",
            "Inner result window is too large, the inner hit definition's [big]'s from + size "
            "must be less than or equal to: [100] but was [101]")
        error_is(w.req("POST", p, {"collapse": {"field": "g"}, "sort": ["n"],
                                   "search_after": [3]}), 400, "illegal_argument_exception",
                 "cannot use `collapse` in conjunction with `search_after`")
        error_is(w.req("POST", p, {"collapse": {"field": "g"}, "rescore": {
            "query": {"rescore_query": {"match_all": {}}}}}), 400, "illegal_argument_exception",
            "cannot use `collapse` in conjunction with `rescore`")
        error_is(w.req("POST", p + "?scroll=1m", {"collapse": {"field": "g"}}), 400,
                 "action_request_validation_exception", "cannot use `collapse` in a scroll")


# ---- indices_boost ----

@test
def indices_boost_multiplies_per_index():
    for label, w, asks in targets():
        a = index_for(label, w, name="iba")
        b2 = index_for(label, w, name="ibb")
        st, r = w.req("POST", "/_aliases", {"actions": [{"add": {"index": a, "alias":
                                                                   "ibal-" + label}}]})
        eq(st, 200, r)
        q = {"match": {"t": "foo"}}
        n = asks[-1]
        sa, sb = scores(n, a, q), scores(n, b2, q)
        both = "%s,%s" % (a, b2)
        for boost, want_a, want_b in (
                ([{b2: 2}], 1, 2),
                ({a: 1.5, b2: 0.5}, 1.5, 0.5),
                ([{"ibal-" + label: 3}, {a: 10}], 3, 1),      # first match wins
                ([{"ib*-" + label: 4}, {b2: 10}], 4, 4)):
            r = search(n, both, {"query": q, "indices_boost": boost, "size": 200,
                                 "_source": False})
            for h in r["hits"]["hits"]:
                base, f = (sa, want_a) if h["_index"] == a else (sb, want_b)
                close(h["_score"], base[h["_id"]] * f, "%s %s" % (label, boost))
            ranked = [h["_score"] for h in r["hits"]["hits"]]
            eq(ranked, sorted(ranked, reverse=True), label)
        # a point in time takes the boosts too (by concrete index)
        st, pit = n.req("POST", "/%s/_pit?keep_alive=1m" % both)
        eq(st, 200, pit)
        st, r = n.req("POST", "/_search", {
            "query": q, "indices_boost": [{"ibal-" + label: 5}], "size": 200, "_source": False,
            "pit": {"id": pit["id"], "keep_alive": "1m"}})
        eq(st, 200, r)
        eq(len(r["hits"]["hits"]), len(sa) + len(sb), label)
        for h in r["hits"]["hits"]:
            base, f = (sa, 5) if h["_index"] == a else (sb, 1)
            close(h["_score"], base[h["_id"]] * f, "%s pit" % label)
        error_is(n.req("POST", "/_search", {"collapse": {"field": "g", "inner_hits": {}},
                                            "pit": {"id": pit["id"]}}),
                 400, "illegal_argument_exception", "point in time")
        n.req("DELETE", "/_pit", {"id": pit["id"]})
        error_is(w.req("POST", "/%s/_search" % both, {"indices_boost": [{"nope": 2}]}), 404,
                 "index_not_found_exception")
        error_is(w.req("POST", "/%s/_search" % both, {"indices_boost": [{a: 2, b2: 3}]}), 400,
                 "parsing_exception", "Expected [END_OBJECT] in [indices_boost]")
        error_is(w.req("POST", "/%s/_search" % both, {"indices_boost": [{a: "x"}]}), 400,
                 "parsing_exception", "Expected [VALUE_NUMBER] in [indices_boost]")
        error_is(w.req("POST", "/%s/_search" % both, {"indices_boost": 2}), 400,
                 "parsing_exception")


# ---- profile ----

@test
def profile_times_every_shard():
    for label, w, asks in targets():
        ix = index_for(label, w)
        times = set()
        for n in asks:
            for _ in range(2):
                b = search(n, ix, {"query": {"match": {"t": "foo"}}, "profile": True,
                                   "aggs": {"g": {"terms": {"field": "g"}}}})
                shards = b["profile"]["shards"]
                eq(len(shards), 3, label)
                ids = sorted(s["id"] for s in shards)
                for i, sid in enumerate(ids):
                    m = re.fullmatch(r"\[([^\]]+)\]\[([^\]]+)\]\[(\d+)\]", sid)
                    if not m or m.group(2) != ix:
                        raise AssertionError("profile id %r" % sid)
                eq(sorted(int(re.findall(r"\d+", s["id"].split("][")[-1])[0]) for s in shards),
                   [0, 1, 2], label)
                for s in shards:
                    sr = s["searches"]
                    eq(len(sr), 1, label)
                    qp = sr[0]["query"][0]
                    eq(qp["type"], "match", label)
                    eq(qp["description"], "t:foo", label)
                    bd = qp["breakdown"]
                    for k in ("create_weight", "build_scorer", "next_doc", "score", "advance"):
                        if not isinstance(bd.get(k), int):
                            raise AssertionError("breakdown %r lacks %s" % (bd, k))
                    if qp["time_in_nanos"] <= 0 or qp["time_in_nanos"] < bd["next_doc"]:
                        raise AssertionError("time_in_nanos %r" % qp)
                    if not isinstance(sr[0]["rewrite_time"], int):
                        raise AssertionError("rewrite_time")
                    eq(sr[0]["collector"][0]["reason"], "search_top_hits", label)
                    eq(len(s["aggregations"]), 1, label)
                    if label == "cluster":
                        eq(sorted(k for k in s if k in ("node", "local", "hedged", "shard")),
                           ["hedged", "local", "node", "shard"], label)
                        eq(s["id"], "[%s][%s][%d]" % (s["node"], ix, s["shard"]), label)
                    times.add(qp["time_in_nanos"])
                    times.add(s["aggregations"][0]["time_in_nanos"])
        if len(times) < 3:
            raise AssertionError("profile times look constant: %r" % times)
        b = search(w, ix, {"query": {"match": {"t": "foo"}}})
        eq("profile" in b, False, label)
        error_is(w.req("POST", "/%s/_search" % ix, {"profile": "yes"}), 400, "parsing_exception")


# ---- search templates ----

TEMPLATE = ('{"query":{"bool":{"must":{"match":{"t":"{{q}}"}}'
            '{{#only}},"filter":{"terms":{"g":{{#toJson}}groups{{/toJson}}}}{{/only}}}},'
            '"size":{{size}}{{^size}}10{{/size}},"_source":false,'
            '"sort":[{{#by}}{"{{field}}":"{{dir}}"},{{/by}}"_score"]}')


def rendered(params):
    body = {"query": {"bool": {"must": {"match": {"t": params["q"]}}}}}
    if params.get("only"):
        body["query"]["bool"]["filter"] = {"terms": {"g": params["only"]["groups"]}}
    body["size"] = params.get("size") or 10
    body["_source"] = False
    body["sort"] = [{b["field"]: b["dir"]} for b in params.get("by", [])] + ["_score"]
    return body


@test
def render_template():
    n = solo()
    for params in ({"q": "foo", "only": {"groups": ["red", "blue"]}, "size": 5,
                    "by": [{"field": "n", "dir": "desc"}, {"field": "k", "dir": "asc"}]},
                   {"q": "a \"quoted\" bar"}):
        st, b = n.req("POST", "/_render/template", {"source": TEMPLATE, "params": params})
        eq((st, b), (200, {"template_output": rendered(params)}), "render")
    # an object source is a template too
    st, b = n.req("POST", "/_render/template", {
        "source": {"query": {"term": {"g": "{{g}}"}}, "size": "{{n}}"},
        "params": {"g": "red", "n": 3}})
    eq((st, b), (200, {"template_output": {"query": {"term": {"g": "red"}}, "size": "3"}}),
       "object source")
    error_is(n.req("POST", "/_render/template", {"params": {}}), 400,
             "action_request_validation_exception", "template's script is missing")
    error_is(n.req("POST", "/_render/template", {"source": "{{#a}}", "params": {}}), 400,
             "general_script_exception")
    error_is(n.req("POST", "/_render/template", {"source": "{}", "params": [1]}), 400,
             "x_content_parse_exception")
    error_is(n.req("POST", "/_render/template", {"source": "{}", "parms": {}}), 400,
             "x_content_parse_exception", "[search_template] unknown field [parms]")
    error_is(n.req("POST", "/_render/template", {"source": "{\"size\":{{s}}}", "params": {}}),
             400, "x_content_parse_exception", "not a JSON object")


@test
def search_template_inline_stored_and_msearch():
    for label, w, asks in targets():
        ix = index_for(label, w)
        params = {"q": "foo bar", "only": {"groups": ["red", "gold"]}, "size": 7,
                  "by": [{"field": "k", "dir": "desc"}]}
        direct = search(w, ix, rendered(params))
        for n in asks:
            b = search(n, ix, {"source": TEMPLATE, "params": params}, path="_search/template")
            eq(b["hits"], direct["hits"], label)
            b = search(n, ix, {"source": TEMPLATE, "params": params, "profile": True},
                       path="_search/template")
            eq(len(b["profile"]["shards"]), 3, label)
        # stored on one node, used and read back on the others
        st, b = w.req("PUT", "/_scripts/tpl-" + label, {"script": {"lang": "mustache",
                                                                   "source": TEMPLATE}})
        eq((st, b), (200, {"acknowledged": True}), label)
        for n in asks:
            st, b = n.req("GET", "/_scripts/tpl-" + label)
            eq((st, b), (200, {"_id": "tpl-" + label, "found": True,
                               "script": {"lang": "mustache", "source": TEMPLATE}}), label)
            b = search(n, ix, {"id": "tpl-" + label, "params": params}, path="_search/template")
            eq(b["hits"], direct["hits"], label)
        st, b = asks[-1].req("POST", "/_render/template/tpl-" + label, {"params": params})
        eq((st, b), (200, {"template_output": rendered(params)}), label)
        # _msearch/template: one search per header and template
        other = {"q": "qux"}
        lines = [{"index": ix}, {"source": TEMPLATE, "params": params},
                 {}, {"id": "tpl-" + label, "params": other}]
        st, _, raw = asks[-1].raw("POST", "/%s/_msearch/template" % ix,
                                  "".join(__import__("json").dumps(x) + "\n" for x in lines),
                                  headers={"Content-Type": "application/x-ndjson"})
        b = __import__("json").loads(raw)
        eq(st, 200, b)
        eq([r["status"] for r in b["responses"]], [200, 200], label)
        eq(b["responses"][0]["hits"], direct["hits"], label)
        eq(b["responses"][1]["hits"], search(w, ix, rendered(other))["hits"], label)
        # a template that cannot be rendered answers its error in its place
        lines = [{}, {"source": "{{#open}}", "params": {}}, {}, {"source": TEMPLATE,
                                                               "params": params}]
        st, _, raw = asks[0].raw("POST", "/%s/_msearch/template" % ix,
                                 "".join(__import__("json").dumps(x) + "\n" for x in lines),
                                 headers={"Content-Type": "application/x-ndjson"})
        b = __import__("json").loads(raw)
        eq(st, 200, b)
        eq(b["responses"][0]["status"], 400, label)
        eq(b["responses"][0]["error"]["type"], "general_script_exception", label)
        eq(b["responses"][1]["hits"], direct["hits"], label)
        st, b = w.req("DELETE", "/_scripts/tpl-" + label)
        eq((st, b), (200, {"acknowledged": True}), label)
        for n in asks:
            eq(n.req("GET", "/_scripts/tpl-" + label),
               (404, {"_id": "tpl-" + label, "found": False}), label)
        error_is(w.req("DELETE", "/_scripts/tpl-" + label), 404, "resource_not_found_exception")
        error_is(w.req("POST", "/%s/_search/template" % ix, {"id": "tpl-" + label}), 404,
                 "resource_not_found_exception")
        error_is(w.req("PUT", "/_scripts/p-" + label, {"script": {"lang": "painless",
                                                                  "source": "1"}}),
                 400, "illegal_argument_exception", "unsupported lang [painless]")
        error_is(w.req("PUT", "/_scripts/p-" + label, {"script": {"source": "1"}}), 400,
                 "illegal_argument_exception", "must specify lang")
        error_is(w.req("PUT", "/_scripts/p-" + label, {"script": {"lang": "mustache"}}), 400,
                 "illegal_argument_exception", "must specify source")
        error_is(w.req("POST", "/%s/_search/template" % ix,
                       {"source": "{\"query\":{\"bogus\":{}}}"}), 400, "parsing_exception")


@test
def stored_template_survives_a_restart():
    n = solo()
    st, b = n.req("PUT", "/_scripts/kept", {"script": {"lang": "mustache", "source": {
        "query": {"match": {"t": "{{q}}"}}}}})
    eq((st, b), (200, {"acknowledged": True}), "put")
    n.restart()
    st, b = n.req("GET", "/_scripts/kept")
    eq((st, b["script"]), (200, {"lang": "mustache",
                                 "source": '{"query":{"match":{"t":"{{q}}"}}}'}), "after restart")
    st, b = n.req("POST", "/_render/template", {"id": "kept", "params": {"q": "x"}})
    eq((st, b), (200, {"template_output": {"query": {"match": {"t": "x"}}}}), "render by id")



if __name__ == "__main__":
    run_tests(budget_s=120, teardown=teardown)
