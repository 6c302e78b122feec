"""Three gaps Elasticsearch clients hit, on a solo node and a 3-node
static cluster: ?typed_keys on scroll and point-in-time searches;
index.analysis settings on a closed index (refused on an open one); and
_update, _update_by_query and _reindex from an index with _source
disabled (ES's errors, nothing written). Every expectation is worked out
by hand from Elasticsearch 7.x behaviour."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-gaps-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown


def targets():
    """(label, node to write through, nodes to ask)."""
    c = cluster()
    return [("solo", solo(), [solo()]), ("cluster", c["node-1"], list(c.values()))]


def ok(resp, what, status=200):
    st, b = resp
    eq(st, status, "%s: %s" % (what, b))
    return b


def hit_ids(b):
    return sorted(h["_id"] for h in b["hits"]["hits"])


def search(n, index, query, what):
    b = ok(n.req("POST", "/%s/_search" % index, {"query": query}), what)
    return hit_ids(b)


# ---- 1. typed_keys on scroll and point in time ----

TAGS = {"doc_count_error_upper_bound": 0, "sum_other_doc_count": 0,
        "buckets": [{"key": "a", "doc_count": 3}, {"key": "b", "doc_count": 2}]}


def load_tags(n, index):
    ok(n.req("PUT", "/" + index, {"settings": {"number_of_shards": 2},
                                  "mappings": {"properties": {"tag": {"type": "keyword"},
                                                              "v": {"type": "integer"}}}}),
       "create " + index)
    lines = []
    for i, (tag, v) in enumerate([("a", 1), ("a", 5), ("b", 2), ("a", 3), ("b", 4)]):
        lines += [{"index": {"_index": index, "_id": str(i + 1)}}, {"tag": tag, "v": v}]
    b = ok(n.bulk(lines, params="?refresh=true"), "bulk")
    eq(b["errors"], False, "bulk errors")


AGGS = {"tags": {"terms": {"field": "tag"}}, "top": {"max": {"field": "v"}}}


@test
def typed_keys_scroll():
    for label, n, nodes in targets():
        load_tags(n, "tk-scroll")
        body = {"size": 2, "sort": ["_doc"], "aggs": AGGS}
        b = ok(n.req("POST", "/tk-scroll/_search?scroll=1m&typed_keys=true", body),
               label + " first page")
        eq(b["aggregations"], {"sterms#tags": TAGS, "max#top": {"value": 5.0}},
           label + " typed aggregations on the first page")
        seen = [h["_id"] for h in b["hits"]["hits"]]
        sid = b["_scroll_id"]
        for m in nodes:  # any node serves the next page; ES sends no aggs there
            if len(seen) >= 5:
                break
            p = ok(m.req("POST", "/_search/scroll?typed_keys=true",
                         {"scroll": "1m", "scroll_id": sid}), label + " next page")
            eq("aggregations" in p, False, label + " later pages carry no aggregations")
            seen += [h["_id"] for h in p["hits"]["hits"]]
            sid = p["_scroll_id"]
        eq(sorted(seen), ["1", "2", "3", "4", "5"][:len(seen)], label + " pages")
        ok(n.req("DELETE", "/_search/scroll", {"scroll_id": sid}), label + " clear")
        # without the flag: plain names, as before
        b = ok(n.req("POST", "/tk-scroll/_search?scroll=1m", body), label + " untyped")
        eq(sorted(b["aggregations"]), ["tags", "top"], label + " untyped names")
        ok(n.req("DELETE", "/_search/scroll", {"scroll_id": b["_scroll_id"]}), label + " clear")


@test
def typed_keys_pit():
    for label, n, nodes in targets():
        load_tags(n, "tk-pit")
        pid = ok(n.req("POST", "/tk-pit/_pit?keep_alive=1m"), label + " open pit")["id"]
        body = {"size": 1, "pit": {"id": pid}, "aggs": AGGS,
                "suggest": {"sp": {"text": "a", "term": {"field": "tag"}}}}
        for m in nodes:
            b = ok(m.req("POST", "/_search?typed_keys=true", body), label + " pit search")
            eq(b["aggregations"], {"sterms#tags": TAGS, "max#top": {"value": 5.0}},
               label + " typed aggregations")
            eq(list(b["suggest"]), ["term#sp"], label + " typed suggestion")
            eq(b["hits"]["total"]["value"], 5, label + " total")
        b = ok(n.req("POST", "/_search", body), label + " untyped pit search")
        eq((sorted(b["aggregations"]), list(b["suggest"])), (["tags", "top"], ["sp"]),
           label + " untyped names")
        ok(n.req("DELETE", "/_pit", {"id": pid}), label + " close pit")


# ---- 2. analysis settings and closed indices ----

WS = {"analysis": {"analyzer": {"ws": {"type": "custom", "tokenizer": "whitespace"}}}}


def uuid_of(n, index):
    return ok(n.req("GET", "/%s/_settings" % index), "settings")[index]["settings"]["index"]["uuid"]


@test
def analysis_refused_on_open_index():
    for label, n, nodes in targets():
        ok(n.req("PUT", "/an-open", {"mappings": {"properties": {"t": {"type": "text"}}}}),
           label + " create")
        uuid = uuid_of(n, "an-open")
        r = n.req("PUT", "/an-open/_settings", WS)
        error_is(r, 400, "illegal_argument_exception")
        eq(r[1]["error"]["reason"],
           "Can't update non dynamic settings [[index.analysis.analyzer.ws.tokenizer, "
           "index.analysis.analyzer.ws.type]] for open indices [[an-open/%s]]" % uuid,
           label + " reason")
        # flat keys, mixed with a dynamic setting: refused as a whole
        r = n.req("PUT", "/an-open/_settings",
                  {"index.number_of_replicas": 0,
                   "index.analysis.analyzer.ws.tokenizer": "whitespace"})
        error_is(r, 400, "illegal_argument_exception",
                 "[[index.analysis.analyzer.ws.tokenizer]] for open indices")
        for m in nodes:
            s = ok(m.req("GET", "/an-open/_settings"), "get")["an-open"]["settings"]["index"]
            eq("analysis" in s, False, label + " nothing applied")
        # one closed and one open index: refused for both, nothing applied
        ok(n.req("PUT", "/an-closed"), label + " create an-closed")
        ok(n.req("POST", "/an-closed/_close"), label + " close an-closed")
        r = n.req("PUT", "/an-closed,an-open/_settings?expand_wildcards=all", WS)
        error_is(r, 400, "illegal_argument_exception", "for open indices [[an-open/%s]]" % uuid)
        for m in nodes:
            s = ok(m.req("GET", "/an-closed/_settings"), "get")["an-closed"]["settings"]["index"]
            eq("analysis" in s, False, label + " the closed index unchanged")
        # an analyzer that does not exist, in a mapping
        r = n.req("PUT", "/an-open/_mapping",
                  {"properties": {"w": {"type": "text", "analyzer": "ws"}}})
        error_is(r, 400, "mapper_parsing_exception",
                 "analyzer [ws] has not been configured in mappings")


@test
def analysis_added_on_closed_index():
    for label, n, nodes in targets():
        ok(n.req("PUT", "/an-add", {"settings": {"number_of_shards": 2},
                                    "mappings": {"properties": {"t": {"type": "text"}}}}),
           label + " create")
        ok(n.req("PUT", "/an-add/_doc/1?refresh=true", {"t": "Foo-Bar"}), label + " doc 1", 201)
        ok(n.req("POST", "/an-add/_close"), label + " close")
        # a bad analyzer on a closed index: 400, nothing changes
        r = n.req("PUT", "/an-add/_settings",
                  {"analysis": {"analyzer": {"bad": {"type": "custom", "tokenizer": "nope"}}}})
        error_is(r, 400, "illegal_argument_exception", "failed to find tokenizer")
        eq(ok(n.req("PUT", "/an-add/_settings", WS), label + " put analysis"),
           {"acknowledged": True}, label + " ack")
        ok(n.req("POST", "/an-add/_open"), label + " open")
        for m in nodes:
            s = ok(m.req("GET", "/an-add/_settings"), "get")["an-add"]["settings"]["index"]
            eq(s["analysis"], WS["analysis"], label + " analysis on every node")
        # a new field naming the new analyzer; the existing field unchanged
        ok(n.req("PUT", "/an-add/_mapping",
                 {"properties": {"w": {"type": "text", "analyzer": "ws"}}}), label + " mapping")
        ok(n.req("PUT", "/an-add/_doc/2?refresh=true", {"t": "Foo-Bar", "w": "Foo-Bar baz"}),
           label + " doc 2", 201)
        for m in nodes:
            # whitespace, no lowercase: "Foo-Bar", "baz"
            eq(search(m, "an-add", {"match": {"w": "Foo-Bar"}}, "w"), ["2"], label + " ws token")
            eq(search(m, "an-add", {"match": {"w": "foo"}}, "w"), [], label + " ws: no split")
            # standard on t: "foo", "bar" for both
            eq(search(m, "an-add", {"match": {"t": "FOO"}}, "t"), ["1", "2"], label + " t")
        r = n.req("POST", "/an-add/_analyze", {"field": "w", "text": "A-b C"})
        eq([t["token"] for t in ok(r, label + " analyze")["tokens"]], ["A-b", "C"],
           label + " _analyze by field")


@test
def analysis_changed_on_closed_index():
    """ES lets a closed index change an analyzer its segments were indexed
    with: old documents keep their old tokens, new ones and queries use
    the new analyzer."""
    for label, n, nodes in targets():
        ok(n.req("PUT", "/an-chg", {"settings": WS, "mappings": {
            "properties": {"w": {"type": "text", "analyzer": "ws"}}}}), label + " create")
        ok(n.req("PUT", "/an-chg/_doc/1?refresh=true", {"w": "Foo Bar"}), label + " doc 1", 201)
        eq(search(n, "an-chg", {"match": {"w": "Foo"}}, "before"), ["1"], label + " before")
        ok(n.req("POST", "/an-chg/_close"), label + " close")
        ok(n.req("PUT", "/an-chg/_settings",
                 {"index.analysis.analyzer.ws.filter": ["lowercase"]}), label + " change")
        ok(n.req("POST", "/an-chg/_open"), label + " open")
        ok(n.req("PUT", "/an-chg/_doc/2?refresh=true", {"w": "Foo Qux"}), label + " doc 2", 201)
        for m in nodes:
            s = ok(m.req("GET", "/an-chg/_settings"), "get")["an-chg"]["settings"]["index"]
            eq(s["analysis"]["analyzer"]["ws"],
               {"type": "custom", "tokenizer": "whitespace", "filter": ["lowercase"]},
               label + " merged analyzer")
            # "Foo" now searches "foo": doc 1 holds "Foo", doc 2 "foo"
            eq(search(m, "an-chg", {"match": {"w": "Foo"}}, "after"), ["2"], label + " after")
            eq(search(m, "an-chg", {"term": {"w": "Foo"}}, "old token"), ["1"],
               label + " doc 1 keeps its token")
    # the merged analysis is persisted with the index: a restart keeps it
    n = solo()
    n.restart()
    eq(search(n, "an-chg", {"match": {"w": "FOO"}}, "restart"), ["2"], "after a restart")


# ---- 3. _source disabled ----

@test
def source_disabled_writes():
    for label, n, nodes in targets():
        ok(n.req("PUT", "/ns", {"settings": {"number_of_shards": 2}, "mappings": {
            "_source": {"enabled": False}, "properties": {"a": {"type": "integer"}}}}),
           label + " create")
        ok(n.req("PUT", "/ns/_doc/1?refresh=true", {"a": 1}), label + " doc", 201)
        r = n.req("POST", "/ns/_update/1", {"doc": {"a": 2}})
        error_is(r, 400, "document_source_missing_exception", "[_doc][1]: document source missing")
        r = n.req("POST", "/ns/_update/1", {"script": {"source": "ctx._source.a = 3"}})
        error_is(r, 400, "document_source_missing_exception")
        r = n.req("POST", "/_reindex?refresh=true",
                  {"source": {"index": "ns"}, "dest": {"index": "ns-dst"}})
        error_is(r, 400, "illegal_argument_exception")
        eq(r[1]["error"]["reason"], "[ns][_doc][1] didn't store _source", label + " reindex")
        r = n.req("POST", "/_reindex?refresh=true&slices=2",
                  {"source": {"index": "ns"}, "dest": {"index": "ns-dst"}})
        error_is(r, 400, "illegal_argument_exception", "[ns][_doc][1] didn't store _source")
        r = n.req("POST", "/ns/_update_by_query?refresh=true")
        error_is(r, 400, "illegal_argument_exception")
        eq(r[1]["error"]["reason"], "[ns][_doc][1] didn't store _source", label + " ubq")
        r = n.req("POST", "/ns/_update_by_query?refresh=true",
                  {"script": {"source": "ctx._source.a = 4"}})
        error_is(r, 400, "illegal_argument_exception", "didn't store _source")
        for m in nodes:
            st, _ = m.req("GET", "/ns-dst/_count")
            eq(st, 404, label + " reindex wrote nothing (no destination)")
            b = ok(m.req("GET", "/ns/_doc/1"), label + " get")
            eq((b["found"], b["_version"], "_source" in b), (True, 1, False),
               label + " the document is unchanged")
            eq(search(m, "ns", {"term": {"a": 1}}, "a"), ["1"], label + " still indexed as 1")
        # a reindex that matches nothing creates no destination, as ES
        b = ok(n.req("POST", "/_reindex", {"source": {"index": "ns", "query": {
            "term": {"a": 9}}}, "dest": {"index": "ns-none"}}), label + " empty reindex")
        eq((b["total"], b["created"]), (0, 0), label + " nothing to copy")
        eq(n.req("GET", "/ns-none/_count")[0], 404, label + " no destination created")
        error_is(n.req("POST", "/_reindex", {"source": {"index": "ns"},
                                             "dest": {"index": "Bad"}}),
                 400, "invalid_index_name_exception")
        # a delete needs no source
        b = ok(n.req("POST", "/ns/_delete_by_query?refresh=true", {"query": {"match_all": {}}}),
               label + " dbq")
        eq(b["deleted"], 1, label + " deleted")


if __name__ == "__main__":
    run_tests(budget_s=40, teardown=teardown)
