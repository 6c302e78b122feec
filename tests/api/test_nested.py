"""The nested field type on a solo node and a 3-node static cluster: the
mapping (nested, include_in_parent, limits, conflicts, dynamic fields under
a nested path), the nested query (no cross-object matches, every
score_mode, nested inside nested, ignore_unmapped, inner_hits with
_nested offsets, size, from and name), the nested and reverse_nested
aggregations, parent counts unchanged by the hidden nested docs, updates,
deletes and merges of documents holding nested objects, and the
Elasticsearch-shaped 400s. Expected answers come from the small model of
the documents below (plain Python over DOCS)."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node, SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-nested-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown

MAPPING = {"properties": {
    "title": {"type": "keyword"},
    "comments": {"type": "nested", "properties": {
        "author": {"type": "keyword"},
        "stars": {"type": "long"},
        "replies": {"type": "nested", "properties": {"who": {"type": "keyword"}}}}},
    "tags": {"type": "nested", "include_in_parent": True,
             "properties": {"t": {"type": "keyword"}}},
}}

DOCS = {
    "1": {"title": "a", "comments": [
        {"author": "alice", "stars": 1},
        {"author": "bob", "stars": 5, "replies": [{"who": "carol"}, {"who": "dave"}]}],
        "tags": [{"t": "red"}]},
    "2": {"title": "b", "comments": [{"author": "alice", "stars": 5}], "tags": [{"t": "blue"}]},
    "3": {"title": "c"},
    "4": {"title": "d", "comments": {"author": "bob", "stars": 2}},
    "5": {"title": "e", "comments": [], "tags": [{"t": "red"}, {"t": "green"}]},
}


def comments(d):
    c = d.get("comments", [])
    return c if isinstance(c, list) else [c]


def targets():
    """(label, node to write through, nodes to ask)."""
    c = cluster()
    return [("solo", solo(), [solo()]), ("cluster", c["node-1"], list(c.values()))]


def make_index(n, name, docs=DOCS, shards=2, replicas=0, settings=None):
    s = {"number_of_shards": shards, "number_of_replicas": replicas}
    s.update(settings or {})
    st, b = n.req("PUT", "/" + name, {"settings": s, "mappings": MAPPING})
    eq(st, 200, "create %s: %s" % (name, b))
    lines = []
    for i, d in docs.items():
        lines += [{"index": {"_index": name, "_id": i}}, d]
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk into %s: %s" % (name, b))


_made = set()


def ensure(label, n):
    if label not in _made:
        make_index(n, "nest", replicas=1 if label == "cluster" else 0)
        _made.add(label)


def search(n, body, index="nest"):
    st, b = n.req("POST", "/%s/_search" % index, body)
    eq(st, 200, "search %s: %s" % (body, b))
    return b


def ids(n, query, index="nest"):
    b = search(n, {"query": query, "size": 100, "_source": False}, index)
    return sorted(h["_id"] for h in b["hits"]["hits"])


def nested(query, **kw):
    body = {"path": kw.pop("path", "comments"), "query": query}
    body.update(kw)
    return {"nested": body}


def term(f, v):
    return {"term": {f: v}}


@test
def mapping_and_field_caps_show_nested():
    for label, w, nodes in targets():
        ensure(label, w)
        for n in nodes:
            st, b = n.req("GET", "/nest/_mapping")
            eq(st, 200)
            props = b["nest"]["mappings"]["properties"]
            eq(props["comments"]["type"], "nested", label)
            eq(props["comments"]["properties"]["replies"]["type"], "nested", label)
            eq(props["tags"], {"type": "nested", "include_in_parent": True,
                               "properties": {"t": {"type": "keyword"}}}, label)
            st, b = n.req("GET", "/nest/_field_caps?fields=comments,comments.author")
            eq(st, 200)
            eq(list(b["fields"]["comments"].keys()), ["nested"], label)
            eq(b["fields"]["comments.author"]["keyword"]["aggregatable"], True, label)


@test
def parent_counts_unchanged():
    for label, w, nodes in targets():
        ensure(label, w)
        for n in nodes:
            st, b = n.req("GET", "/nest/_count")
            eq((st, b["count"]), (200, len(DOCS)), label + " _count")
            b = search(n, {"query": {"match_all": {}}, "size": 100,
                           "aggs": {"t": {"terms": {"field": "title", "size": 20}}}})
            eq(b["hits"]["total"], {"value": len(DOCS), "relation": "eq"}, label)
            eq(sorted(h["_id"] for h in b["hits"]["hits"]), sorted(DOCS), label + " ids")
            eq(sorted((x["key"], x["doc_count"]) for x in b["aggregations"]["t"]["buckets"]),
               sorted((d["title"], 1) for d in DOCS.values()), label + " terms")
            # _source is kept as given
            b = search(n, {"query": {"ids": {"values": ["4"]}}})
            eq(b["hits"]["hits"][0]["_source"], DOCS["4"], label + " _source")
            b = search(n, {"query": {"match_all": {}}, "size": 100, "sort": [{"title": "desc"}]})
            eq([h["_id"] for h in b["hits"]["hits"]], ["5", "4", "3", "2", "1"], label + " sort")


@test
def top_level_queries_do_not_see_nested_fields():
    for label, w, nodes in targets():
        ensure(label, w)
        for n in nodes:
            eq(ids(n, term("comments.author", "alice")), [], label)
            eq(ids(n, {"exists": {"field": "comments.stars"}}), [], label)
            # include_in_parent copies the tags into the root doc
            want = sorted(i for i, d in DOCS.items()
                          if any(t["t"] == "red" for t in d.get("tags", [])))
            eq(ids(n, term("tags.t", "red")), want, label + " include_in_parent")
            eq(ids(n, nested(term("tags.t", "red"), path="tags")), want, label + " nested tags")


@test
def no_cross_object_matches():
    for label, w, nodes in targets():
        ensure(label, w)
        for author, stars in [("alice", 5), ("alice", 1), ("bob", 5), ("bob", 1), ("bob", 2)]:
            want = sorted(i for i, d in DOCS.items()
                          if any(c["author"] == author and c["stars"] == stars
                                 for c in comments(d)))
            q = nested({"bool": {"must": [term("comments.author", author),
                                          term("comments.stars", stars)]}})
            for n in nodes:
                eq(ids(n, q), want, "%s %s/%d" % (label, author, stars))
        # range and exists inside nested
        want = sorted(i for i, d in DOCS.items() if any(c["stars"] >= 2 for c in comments(d)))
        for n in nodes:
            eq(ids(n, nested({"range": {"comments.stars": {"gte": 2}}})), want, label + " range")
            eq(ids(n, nested({"exists": {"field": "comments.author"}})), ["1", "2", "4"],
               label + " exists")
            eq(ids(n, nested({"match_all": {}})), ["1", "2", "4"], label + " match_all")
            eq(ids(n, {"bool": {"must_not": [nested({"match_all": {}})]}}), ["3", "5"],
               label + " must_not")


def child_score(c):
    """The inner query of score_modes: 3 for bob, +1 for 5 stars."""
    return (3.0 if c["author"] == "bob" else 0.0) + (1.0 if c["stars"] >= 5 else 0.0)


INNER = {"bool": {"filter": [{"range": {"comments.stars": {"gte": 1}}}], "should": [
    {"constant_score": {"filter": term("comments.author", "bob"), "boost": 3}},
    {"constant_score": {"filter": {"range": {"comments.stars": {"gte": 5}}}, "boost": 1}}]}}


@test
def score_modes():
    modes = {"avg": lambda s: sum(s) / len(s), "max": max, "min": min, "sum": sum,
             "none": lambda s: 0.0}
    for label, w, nodes in targets():
        ensure(label, w)
        for mode, f in modes.items():
            want = {i: f([child_score(c) for c in comments(d)])
                    for i, d in DOCS.items() if comments(d)}
            q = nested(INNER, score_mode=mode)
            if mode == "avg":
                q = nested(INNER)  # the default
            for n in nodes:
                b = search(n, {"query": q, "size": 100, "_source": False})
                got = {h["_id"]: h["_score"] for h in b["hits"]["hits"]}
                eq(got, want, "%s score_mode %s" % (label, mode))
        # boost multiplies the combined score
        for n in nodes:
            b = search(n, {"query": nested(INNER, score_mode="max", boost=2), "_source": False})
            eq({h["_id"]: h["_score"] for h in b["hits"]["hits"]},
               {"1": 8.0, "2": 2.0, "4": 6.0}, label + " boost")


@test
def nested_inside_nested():
    for label, w, nodes in targets():
        ensure(label, w)
        for n in nodes:
            q = nested({"bool": {"must": [
                term("comments.author", "bob"),
                nested(term("comments.replies.who", "carol"), path="comments.replies")]}})
            eq(ids(n, q), ["1"], label)
            q = nested({"bool": {"must": [
                term("comments.author", "alice"),
                nested(term("comments.replies.who", "carol"), path="comments.replies")]}})
            eq(ids(n, q), [], label + " alice has no replies")
            # a deeper path straight from the root
            eq(ids(n, nested(term("comments.replies.who", "dave"), path="comments.replies")),
               ["1"], label + " from the root")


@test
def inner_hits():
    for label, w, nodes in targets():
        ensure(label, w)
        for n in nodes:
            b = search(n, {"query": nested(term("comments.author", "bob"), inner_hits={}),
                           "sort": [{"title": "asc"}]})
            hits = b["hits"]["hits"]
            eq([h["_id"] for h in hits], ["1", "4"], label)
            ih = hits[0]["inner_hits"]["comments"]["hits"]
            eq(ih["total"], {"value": 1, "relation": "eq"}, label)
            eq(len(ih["hits"]), 1, label)
            x = ih["hits"][0]
            eq((x["_index"], x["_id"], x["_nested"]), ("nest", "1", {"field": "comments",
                                                                     "offset": 1}), label)
            eq(x["_source"], DOCS["1"]["comments"][1], label + " source")
            x = hits[1]["inner_hits"]["comments"]["hits"]["hits"][0]
            eq((x["_nested"], x["_source"]), ({"field": "comments", "offset": 0},
                                              DOCS["4"]["comments"]), label + " single object")
            # size, from, name; equal scores come in offset order
            b = search(n, {"query": nested({"match_all": {}}, inner_hits={
                "name": "c", "size": 1, "from": 1}), "sort": [{"title": "asc"}]})
            got = [(h["_id"], h["inner_hits"]["c"]["hits"]["total"]["value"],
                    [x["_nested"]["offset"] for x in h["inner_hits"]["c"]["hits"]["hits"]])
                   for h in b["hits"]["hits"]]
            eq(got, [("1", 2, [1]), ("2", 1, []), ("4", 1, [])], label + " size/from")
            # scores order the inner hits
            b = search(n, {"query": nested(INNER, inner_hits={"size": 5}),
                           "sort": [{"title": "asc"}]})
            h = b["hits"]["hits"][0]["inner_hits"]["comments"]["hits"]
            eq([(x["_nested"]["offset"], x["_score"]) for x in h["hits"]], [(1, 4.0), (0, 0.0)],
               label + " scored")
            eq(h["max_score"], 4.0, label)
            # _source of inner hits: false, patterns (relative or full), includes/excludes
            for src, want in [(False, None), ("stars", {"stars": 5}),
                              (["comments.author"], {"author": "bob"}),
                              ({"excludes": ["replies", "stars"]}, {"author": "bob"})]:
                b = search(n, {"query": nested(term("comments.author", "bob"),
                                               inner_hits={"_source": src}),
                               "sort": [{"title": "asc"}]})
                x = b["hits"]["hits"][0]["inner_hits"]["comments"]["hits"]["hits"][0]
                eq(x.get("_source"), want, "%s inner _source %r" % (label, src))
            # inner hits of a nested query inside a nested query: per outer object
            q = nested({"bool": {"must": [
                {"range": {"comments.stars": {"gte": 1}}},
                nested(term("comments.replies.who", "dave"), path="comments.replies",
                       inner_hits={"name": "r"})]}}, inner_hits={"name": "c"})
            b = search(n, {"query": q})
            eq([h["_id"] for h in b["hits"]["hits"]], ["1"], label)
            outer = b["hits"]["hits"][0]["inner_hits"]["c"]["hits"]["hits"]
            eq([x["_nested"]["offset"] for x in outer], [1], label + " outer")
            inner = outer[0]["inner_hits"]["r"]["hits"]
            eq((inner["total"]["value"], [(x["_nested"], x["_source"]) for x in inner["hits"]]),
               (1, [({"field": "comments", "offset": 1,
                      "_nested": {"field": "replies", "offset": 1}}, {"who": "dave"})]),
               label + " inner")
            error_is(n.req("POST", "/nest/_search", {"query": nested(nested(
                {"match_all": {}}, path="comments.replies", inner_hits={}))}), 400,
                "parsing_exception", "inside a nested query that has no inner_hits")
            # two levels: _nested names both offsets
            b = search(n, {"query": nested(term("comments.replies.who", "dave"),
                                           path="comments.replies", inner_hits={})})
            x = b["hits"]["hits"][0]["inner_hits"]["comments.replies"]["hits"]["hits"][0]
            eq(x["_nested"], {"field": "comments", "offset": 1,
                              "_nested": {"field": "replies", "offset": 1}}, label)
            eq(x["_source"], {"who": "dave"}, label)


def sort_model(order, mode, author=None):
    """(id, sort value) for a nested sort on comments.stars, missing last."""
    rows = []
    for i, d in DOCS.items():
        v = [c["stars"] for c in comments(d) if author is None or c["author"] == author]
        if not v:
            rows.append((i, None))
            continue
        m = mode or ("max" if order == "desc" else "min")
        rows.append((i, {"min": min, "max": max, "sum": sum}[m](v)))
    # ties by the second key, title ascending (the titles sort like the ids)
    have = sorted((r for r in rows if r[1] is not None),
                  key=lambda r: (-r[1] if order == "desc" else r[1], r[0]))
    return have + sorted(r for r in rows if r[1] is None)


@test
def nested_sort():
    cases = [("asc", None, None), ("desc", None, None), ("asc", "sum", None),
             ("desc", "max", "alice"), ("asc", "min", "bob")]
    for label, w, nodes in targets():
        ensure(label, w)
        for order, mode, author in cases:
            key = {"order": order, "nested": {"path": "comments"}}
            if mode:
                key["mode"] = mode
            if author:
                key["nested"]["filter"] = term("comments.author", author)
            want = sort_model(order, mode, author)
            for n in nodes:
                b = search(n, {"size": 100, "_source": False,
                               "sort": [{"comments.stars": key}, {"title": "asc"}]})
                got = [(h["_id"], h["sort"][0]) for h in b["hits"]["hits"]]
                eq(got, want, "%s sort %s %s %s" % (label, order, mode, author))


@test
def nested_and_reverse_nested_aggs():
    for label, w, nodes in targets():
        ensure(label, w)
        allc = [(i, c) for i, d in DOCS.items() for c in comments(d)]
        authors = sorted({c["author"] for _, c in allc})
        for n in nodes:
            b = search(n, {"size": 0, "aggs": {"c": {"nested": {"path": "comments"}, "aggs": {
                "a": {"terms": {"field": "comments.author"}, "aggs": {
                    "s": {"sum": {"field": "comments.stars"}},
                    "back": {"reverse_nested": {}, "aggs": {
                        "t": {"terms": {"field": "title"}}}}}},
                "r": {"nested": {"path": "comments.replies"}}}}}})
            c = b["aggregations"]["c"]
            eq(c["doc_count"], len(allc), label + " nested doc_count")
            eq(c["r"]["doc_count"], sum(len(x.get("replies", [])) for _, x in allc), label)
            got = {x["key"]: (x["doc_count"], x["s"]["value"], x["back"]["doc_count"],
                              sorted(t["key"] for t in x["back"]["t"]["buckets"]))
                   for x in c["a"]["buckets"]}
            want = {}
            for a in authors:
                mine = [(i, x) for i, x in allc if x["author"] == a]
                parents = sorted({i for i, _ in mine})
                want[a] = (len(mine), float(sum(x["stars"] for _, x in mine)), len(parents),
                           sorted(DOCS[i]["title"] for i in parents))
            eq(got, want, label + " terms/sum/reverse_nested")
            # the query narrows the parents the nested agg starts from
            b = search(n, {"size": 0, "query": term("title", "a"),
                           "aggs": {"c": {"nested": {"path": "comments"}}}})
            eq(b["aggregations"]["c"]["doc_count"], 2, label + " filtered")
            # order a terms agg by a nested sub-agg's doc_count
            b = search(n, {"size": 0, "aggs": {"t": {
                "terms": {"field": "title", "order": {"c": "desc"}},
                "aggs": {"c": {"nested": {"path": "comments"}}}}}})
            eq([(x["key"], x["c"]["doc_count"]) for x in b["aggregations"]["t"]["buckets"]][:1],
               [("a", 2)], label + " order by nested")


@test
def update_delete_and_merge():
    for label, w, nodes in targets():
        name = "nest-upd"
        make_index(w, name, replicas=1 if label == "cluster" else 0)
        q_alice5 = nested({"bool": {"must": [term("comments.author", "alice"),
                                             term("comments.stars", 5)]}})
        q_bob = nested(term("comments.author", "bob"))
        st, b = w.req("PUT", "/%s/_doc/2?refresh=true" % name,
                      {"title": "b", "comments": [{"author": "zed", "stars": 9}]})
        eq(st, 200, "update: %s" % b)
        st, b = w.req("DELETE", "/%s/_doc/4?refresh=true" % name)
        eq(st, 200, "delete: %s" % b)
        st, b = w.req("POST", "/%s/_update/1?refresh=true" % name,
                      {"doc": {"comments": [{"author": "bob", "stars": 3}]}})
        eq(st, 200, "partial update: %s" % b)
        for phase in ("before merge", "after merge"):
            for n in nodes:
                what = "%s %s" % (label, phase)
                eq(ids(n, q_alice5, name), [], what)
                eq(ids(n, nested(term("comments.author", "zed")), name), ["2"], what)
                eq(ids(n, q_bob, name), ["1"], what)
                eq(ids(n, nested({"match_all": {}}), name), ["1", "2"], what)
                st, b = n.req("GET", "/%s/_count" % name)
                eq(b["count"], 4, what + " count")
                b = search(n, {"size": 0, "aggs": {"c": {"nested": {"path": "comments"}}}}, name)
                eq(b["aggregations"]["c"]["doc_count"], 2, what + " nested agg")
                b = search(n, {"query": q_bob}, name)
                eq(b["hits"]["hits"][0]["_source"]["comments"], [{"author": "bob", "stars": 3}],
                   what)
            st, b = w.req("POST", "/%s/_forcemerge?max_num_segments=1" % name)
            eq(st, 200, "forcemerge: %s" % b)
            st, b = w.req("GET", "/%s/_stats" % name)
            p = b["_all"]["primaries"]
            # the merge took (one segment per shard), deletes and all
            eq((p["segments"]["count"] <= 2, p["docs"]), (True, {"count": 4, "deleted": 0}),
               label + " merged")


@test
def dynamic_fields_under_nested_path():
    for label, w, nodes in targets():
        name = "nest-dyn"
        st, b = w.req("PUT", "/" + name, {"settings": {"number_of_shards": 1},
                                          "mappings": {"properties": {"c": {"type": "nested"}}}})
        eq(st, 200, b)
        st, b = w.req("PUT", "/%s/_doc/1?refresh=true" % name,
                      {"c": [{"k": "x", "n": 1}, {"k": "y", "n": 2}]})
        eq(st, 201, b)
        for n in nodes:
            st, b = n.req("GET", "/%s/_mapping" % name)
            c = b[name]["mappings"]["properties"]["c"]
            eq(c["type"], "nested", label)
            eq(sorted(c["properties"]), ["k", "n"], label)
            q = nested({"bool": {"must": [{"match": {"c.k": "x"}}, term("c.n", 2)]}}, path="c")
            eq(ids(n, q, name), [], label + " cross-object")
            q = nested({"bool": {"must": [{"match": {"c.k": "y"}}, term("c.n", 2)]}}, path="c")
            eq(ids(n, q, name), ["1"], label)
        # a dynamic template mapping new objects as nested
        name = "nest-dt"
        st, b = w.req("PUT", "/" + name, {"mappings": {"dynamic_templates": [{"objs": {
            "match": "n_*", "match_mapping_type": "object", "mapping": {"type": "nested"}}}]}})
        eq(st, 200, b)
        st, b = w.req("PUT", "/%s/_doc/1?refresh=true" % name,
                      {"n_x": [{"a": "p", "b": 1}, {"a": "q", "b": 2}], "o": {"a": "r"}})
        eq(st, 201, b)
        for n in nodes:
            st, b = n.req("GET", "/%s/_mapping" % name)
            props = b[name]["mappings"]["properties"]
            eq((props["n_x"]["type"], props["o"].get("type")), ("nested", None), label)
            q = nested({"bool": {"must": [{"match": {"n_x.a": "p"}}, term("n_x.b", 2)]}},
                       path="n_x")
            eq(ids(n, q, name), [], label + " template cross-object")
            q["nested"]["query"]["bool"]["must"][0] = {"match": {"n_x.a": "q"}}
            eq(ids(n, q, name), ["1"], label + " template")


@test
def copy_to_and_include_in_root():
    for label, w, nodes in targets():
        name = "nest-copy"
        st, b = w.req("PUT", "/" + name, {"settings": {"number_of_shards": 2}, "mappings": {
            "properties": {"all": {"type": "keyword"}, "c": {"type": "nested", "properties": {
                "a": {"type": "keyword", "copy_to": "all"},
                "r": {"type": "nested", "include_in_root": True,
                      "properties": {"w": {"type": "keyword"}}}}}}}})
        eq(st, 200, b)
        st, b = w.req("PUT", "/%s/_doc/1?refresh=true" % name,
                      {"c": [{"a": "x", "r": [{"w": "q"}]}, {"a": "y"}]})
        eq(st, 201, b)
        for n in nodes:
            eq(ids(n, term("all", "x"), name), ["1"], label + " copy_to to the root")
            eq(ids(n, term("all", "y"), name), ["1"], label)
            eq(ids(n, term("c.a", "x"), name), [], label + " not in the root")
            eq(ids(n, term("c.r.w", "q"), name), ["1"], label + " include_in_root")
            eq(ids(n, nested(term("c.r.w", "q"), path="c.r"), name), ["1"], label)
            q = nested({"bool": {"must": [term("c.a", "y"), nested(term("c.r.w", "q"),
                                                                   path="c.r")]}}, path="c")
            eq(ids(n, q, name), [], label + " q is under x, not y")


@test
def offsets_skip_nulls():
    for label, w, nodes in targets():
        name = "nest-null"
        st, b = w.req("PUT", "/" + name, {"mappings": MAPPING})
        eq(st, 200, b)
        st, b = w.req("PUT", "/%s/_doc/1?refresh=true" % name, {"comments": [
            None, {"author": "a", "stars": 1}, None, {"author": "b", "stars": 2}]})
        eq(st, 201, b)
        for n in nodes:
            b = search(n, {"query": nested(term("comments.author", "b"), inner_hits={})}, name)
            x = b["hits"]["hits"][0]["inner_hits"]["comments"]["hits"]["hits"][0]
            eq((x["_nested"]["offset"], x["_source"]), (1, {"author": "b", "stars": 2}), label)


@test
def refusals():
    for label, w, nodes in targets():
        ensure(label, w)
        n = nodes[-1]
        error_is(n.req("POST", "/nest/_search", {"query": nested({"match_all": {}}, path="title")}),
                 400, "query_shard_exception",
                 "[nested] nested object under path [title] is not of nested type")
        error_is(n.req("POST", "/nest/_search", {"query": nested({"match_all": {}}, path="nope")}),
                 400, "query_shard_exception", "failed to find nested object under path [nope]")
        eq(ids(n, nested({"match_all": {}}, path="nope", ignore_unmapped=True)), [], label)
        error_is(n.req("POST", "/nest/_search", {"query": {"nested": {"query": {
            "match_all": {}}}}}), 400, "parsing_exception", "[nested] requires 'path' field")
        error_is(n.req("POST", "/nest/_search", {"query": nested({"match_all": {}},
                                                                 score_mode="median")}),
                 400, "parsing_exception", "score_mode")
        error_is(n.req("POST", "/nest/_search", {"query": nested({"match_all": {}}, inner_hits={
            "highlight": {"fields": {"comments.author": {}}}})}),
                 400, "parsing_exception", "[inner_hits] option [highlight] is not supported")
        error_is(n.req("POST", "/nest/_search", {"size": 0, "aggs": {"r": {
            "reverse_nested": {}}}}), 400, "illegal_argument_exception",
            "can only be used inside a [nested] aggregation")
        error_is(n.req("POST", "/nest/_search", {"sort": [{"comments.stars": {
            "order": "asc", "nested": {"path": "comments", "max_children": 1}}}]}), 400,
            "parsing_exception", "[nested] sort option [max_children] is not supported")
        error_is(n.req("POST", "/nest/_search", {"sort": [{"comments.stars": {
            "nested": {"path": "title"}}}]}), 400, "query_shard_exception",
            "is not of nested type")
        error_is(n.req("PUT", "/nest/_mapping", {"properties": {"comments": {
            "type": "object"}}}), 400, "illegal_argument_exception",
            "can't be changed from nested to non-nested")


@test
def nested_fields_limit():
    for label, w, nodes in targets():
        props = {"n%d" % i: {"type": "nested"} for i in range(3)}
        error_is(w.req("PUT", "/nest-lim", {
            "settings": {"index.mapping.nested_fields.limit": 2},
            "mappings": {"properties": props}}), 400, "illegal_argument_exception",
            "Limit of nested fields [2] has been exceeded")
        props = {"n%d" % i: {"type": "nested"} for i in range(51)}
        error_is(w.req("PUT", "/nest-lim", {"mappings": {"properties": props}}), 400,
                 "illegal_argument_exception", "Limit of nested fields [50] has been exceeded")
        st, b = w.req("PUT", "/nest-lim", {"settings": {"index.mapping.nested_fields.limit": 2},
                                            "mappings": {"properties": {"a": {"type": "nested"}}}})
        eq(st, 200, b)
        error_is(w.req("PUT", "/nest-lim/_mapping", {"properties": {
            "b": {"type": "nested"}, "c": {"type": "nested"}}}), 400,
            "illegal_argument_exception", "Limit of nested fields [2] has been exceeded")


@test
def nested_objects_limit_and_top_hits_refusal():
    for label, w, nodes in targets():
        ensure(label, w)
        st, b = w.req("PUT", "/nest/_doc/big", {"title": "big", "comments": [
            {"author": "x", "stars": 1}] * 10001})
        eq(st, 400, "%s: %s" % (label, b))
        eq(b["error"]["type"], "mapper_parsing_exception", label)
        if "exceeded the allowed limit of [10000]" not in b["error"]["reason"]:
            raise AssertionError(b)
        st, b = w.req("GET", "/nest/_doc/big")
        eq(st, 404, label + " nothing half-applied")
        # the index setting, at creation and changed later
        st, b = w.req("PUT", "/nest-objlim", {"settings": {
            "index.mapping.nested_objects.limit": 2, "number_of_shards": 2},
            "mappings": MAPPING})
        eq(st, 200, b)
        three = {"comments": [{"author": "a", "stars": 1}] * 3}
        st, b = w.req("PUT", "/nest-objlim/_doc/1", three)
        eq(st, 400, "%s: %s" % (label, b))
        if "allowed limit of [2]" not in b["error"]["reason"]:
            raise AssertionError(b)
        st, b = w.req("PUT", "/nest-objlim/_doc/2", {"comments": [{"author": "a"}] * 2})
        eq(st, 201, "%s: %s" % (label, b))
        st, b = w.req("PUT", "/nest-objlim/_settings", {"index.mapping.nested_objects.limit": 3})
        eq(st, 200, b)
        for i in range(4):  # every shard takes it
            st, b = w.req("PUT", "/nest-objlim/_doc/x%d" % i, three)
            eq(st, 201, "%s after the change: %s" % (label, b))
        error_is(nodes[-1].req("POST", "/nest/_search", {"size": 0, "aggs": {"c": {
            "nested": {"path": "comments"}, "aggs": {"h": {"top_hits": {}}}}}}), 400,
            "illegal_argument_exception", "[top_hits] aggregation [h] under a [nested]")


@test
def restart_replay_snapshot_and_restore():
    repo = tempfile.mkdtemp(prefix="shoal-nested-repo-")
    n = Node(args=["-E", "path.repo=" + repo])
    try:
        make_index(n, "nr", shards=1)
        # acknowledged, not refreshed: replayed from the log after the restart
        st, b = n.req("PUT", "/nr/_doc/6", {"title": "f", "comments": [
            {"author": "zed", "stars": 7}, {"author": "alice", "stars": 2}]})
        eq(st, 201, b)
        n.restart()
        n.refresh("nr")
        q = nested({"bool": {"must": [term("comments.author", "alice"),
                                      term("comments.stars", 5)]}})
        eq(ids(n, q, "nr"), ["2"], "after restart")
        eq(ids(n, nested(term("comments.author", "zed")), "nr"), ["6"], "replayed")
        st, b = n.req("PUT", "/_snapshot/r", {"type": "fs", "settings": {"location": repo}})
        eq(st, 200, b)
        st, b = n.req("PUT", "/_snapshot/r/s1?wait_for_completion=true", {"indices": "nr"})
        eq(st, 200, b)
        st, b = n.req("POST", "/_snapshot/r/s1/_restore?wait_for_completion=true", {
            "indices": "nr", "rename_pattern": "nr", "rename_replacement": "nr2"})
        eq(st, 200, b)
        n.refresh("nr2")
        eq(ids(n, q, "nr2"), ["2"], "restored")
        eq(ids(n, nested(term("comments.author", "zed")), "nr2"), ["6"], "restored")
        st, b = n.req("GET", "/nr2/_count")
        eq(b["count"], len(DOCS) + 1, "restored count")
    finally:
        rc = n.cleanup()
        shutil.rmtree(repo, ignore_errors=True)
    eq(rc, 0, "node exit code")


if __name__ == "__main__":
    run_tests(budget_s=60, teardown=teardown)
