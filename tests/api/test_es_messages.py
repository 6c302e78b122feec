"""Validation messages as Elasticsearch words them (issue #26), on a solo
node and a 3-node static cluster: negative from/size in the URL,
terminate_after, the per-index search limits (index.max_regex_length,
index.max_docvalue_fields_search, index.max_script_fields,
index.max_terms_count) read from the index's own settings, search.max_buckets,
an empty filters aggregation, a negative cardinality precision_threshold,
rest_total_hits_as_int with a numeric track_total_hits, and an mget with no
documents. Clients match these texts, so they are checked whole."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-es-messages-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown


def nodes():
    return (("solo", solo()), ("cluster", cluster()["node-2"]))


def setup(n):
    n.req("DELETE", "/lim")
    st, b = n.req("PUT", "/lim", {
        "settings": {"number_of_shards": 1, "number_of_replicas": 0,
                     "index.max_docvalue_fields_search": 2, "index.max_script_fields": 2,
                     "index.max_terms_count": 2, "index.max_regex_length": 5},
        "mappings": {"properties": {"k": {"type": "keyword"}, "n": {"type": "long"}}}})
    assert st == 200, b
    n.req("PUT", "/lim/_doc/1?refresh=true", {"k": "abc", "n": 1})


IAE = "illegal_argument_exception"


@test
def from_size_and_terminate_after():
    for label, n in nodes():
        setup(n)
        error_is(n.req("GET", "/lim/_search?from=-1"), 400, IAE,
                 "[from] parameter cannot be negative but was [-1]")
        error_is(n.req("POST", "/lim/_search", {"from": -2}), 400, IAE,
                 "[from] parameter cannot be negative but was [-2]")
        error_is(n.req("GET", "/lim/_search?size=-1"), 400, IAE,
                 "[size] parameter cannot be negative, found [-1]")
        error_is(n.req("POST", "/lim/_search", {"terminate_after": -1}), 400, IAE,
                 "terminateAfter must be > 0")


@test
def per_index_search_limits():
    for label, n in nodes():
        setup(n)
        error_is(n.req("POST", "/lim/_search", {"query": {"regexp": {"k": "abcdef"}}}), 400, IAE,
                 "The length of regex [6] used in the Regexp Query request has exceeded the "
                 "allowed maximum of [5]. This maximum can be set by changing the "
                 "[index.max_regex_length] index level setting.")
        st, b = n.req("POST", "/lim/_search", {"query": {"regexp": {"k": "ab.*"}}})
        assert st == 200 and b["hits"]["total"]["value"] == 1, (label, st, b)
        error_is(n.req("POST", "/lim/_search", {"docvalue_fields": ["k", "n", "k"]}), 400, IAE,
                 "Trying to retrieve too many docvalue_fields. Must be less than or equal to: "
                 "[2] but was [3]. This limit can be set by changing the "
                 "[index.max_docvalue_fields_search] index level setting.")
        sf = {("f%d" % i): {"script": {"source": "1"}} for i in range(3)}
        error_is(n.req("POST", "/lim/_search", {"script_fields": sf}), 400, IAE,
                 "Trying to retrieve too many script_fields. Must be less than or equal to: "
                 "[2] but was [3]. This limit can be set by changing the "
                 "[index.max_script_fields] index level setting.")
        error_is(n.req("POST", "/lim/_search",
                       {"query": {"bool": {"filter": [{"terms": {"k": ["a", "b", "c"]}}]}}}),
                 400, IAE,
                 "The number of terms [3] used in the Terms Query request has exceeded the "
                 "allowed maximum of [2]. This maximum can be set by changing the "
                 "[index.max_terms_count] index level setting.")
        st, b = n.req("POST", "/lim/_search", {"query": {"terms": {"k": ["abc", "x"]}}})
        assert st == 200 and b["hits"]["total"]["value"] == 1, (label, st, b)


@test
def aggregation_messages():
    for label, n in nodes():
        setup(n)
        for filters in ({}, []):
            error_is(n.req("POST", "/lim/_search",
                           {"size": 0, "aggs": {"f": {"filters": {"filters": filters}}}}),
                     400, IAE, "[filters] cannot be empty.")
        error_is(n.req("POST", "/lim/_search", {"size": 0, "aggs": {"c": {"cardinality": {
            "field": "k", "precision_threshold": -1}}}}), 400, IAE,
            "[precisionThreshold] must be greater than or equal to 0. Found [-1] in [c]")
        error_is(n.req("POST", "/lim/_search", {"size": 0, "aggs": {"h": {"histogram": {
            "field": "n", "interval": 1, "extended_bounds": {"min": 0, "max": 100000}}}}}),
            400, "too_many_buckets_exception",
            "Trying to create too many buckets. Must be less than or equal to: [")


@test
def total_as_int_and_mget():
    for label, n in nodes():
        setup(n)
        error_is(n.req("POST", "/lim/_search?rest_total_hits_as_int=true",
                       {"track_total_hits": 100}), 400, IAE,
                 "[rest_total_hits_as_int] cannot be used if the tracking of total hits is not "
                 "accurate, got 100")
        st, b = n.req("POST", "/lim/_search?rest_total_hits_as_int=true",
                      {"track_total_hits": True})
        assert st == 200 and b["hits"]["total"] == 1, (label, st, b)
        for body in ({"docs": []}, {"ids": []}, {}):
            error_is(n.req("POST", "/lim/_mget", body), 400, "action_request_validation_exception",
                     "Validation Failed: 1: no documents to get;")



@test
def did_you_mean_on_unknown_names():
    # ES suggests the known names within half the edits of the longer name
    for label, n in nodes():
        setup(n)
        n.req("PUT", "/lim/_doc/1?refresh=true", {"k": "a"})
        b = n.req("POST", "/lim/_update/1", {"dac": {"k": "b"}})
        error_is(b, 400, "x_content_parse_exception")
        assert b[1]["error"]["reason"] == \
            "[1:2] [UpdateRequest] unknown field [dac] did you mean [doc]?", (label, b)
        b = n.req("POST", "/lim/_update/1", {"zzzzz": {"k": "b"}})
        assert b[1]["error"]["reason"] == "[1:2] [UpdateRequest] unknown field [zzzzz]", \
            (label, b)
        b = n.req("POST", "/lim/_search", {"aggs": {"x": {"significant_terms": {
            "field": "k", "jlp": {}}}}})
        assert b[1]["error"]["reason"] == \
            "[significant_terms] unknown field [jlp] did you mean [jlh]?", (label, b)
        b = n.req("POST", "/lim/_search", {"aggs": {"x": {"terms": {"field": "k", "sise": 1}}}})
        assert b[1]["error"]["reason"] == \
            "[terms] unknown field [sise] did you mean [size]?", (label, b)
        b = n.req("GET", "/lim/_stats/fieldata")
        assert b[1]["error"]["reason"] == "request [/lim/_stats/fieldata] contains " \
            "unrecognized metric: [fieldata] -> did you mean [fielddata]?", (label, b)
        b = n.req("GET", "/lim/_search?sise=1&zzz=2")
        assert b[1]["error"]["reason"] == "request [/lim/_search] contains unrecognized " \
            "parameters: [sise] -> did you mean [size]?, [zzz]", (label, b)


@test
def scroll_validation_and_slice_limit():
    VAL = "action_request_validation_exception"
    for label, n in nodes():
        setup(n)
        n.req("PUT", "/lim/_doc/1?refresh=true", {"k": "a"})
        b = n.req("POST", "/lim/_search?scroll=1m&request_cache=true", {"size": 0})
        error_is(b, 400, VAL)
        assert b[1]["error"]["reason"] == (
            "Validation Failed: 1: [size] cannot be [0] in a scroll context;"
            "2: [request_cache] cannot be used in a scroll context;"), (label, b)
        b = n.req("POST", "/lim/_search?scroll=1m&request_cache=true", {})
        assert b[1]["error"]["reason"] == ("Validation Failed: 1: [request_cache] cannot be "
                                           "used in a scroll context;"), (label, b)
        # index.max_slices_per_scroll (1024) bounds a scroll's slices
        body = {"slice": {"id": 0, "max": 1025}}
        b = n.req("POST", "/lim/_search?scroll=1m", body)
        error_is(b, 400, IAE, "The number of slices [1025] is too large. It must be less "
                 "than [1024]. This limit can be set by changing the "
                 "[index.max_slices_per_scroll] index level setting.")
        st, _ = n.req("PUT", "/lim/_settings", {"index.max_slices_per_scroll": 1025})
        assert st == 200
        st, b = n.req("POST", "/lim/_search?scroll=1m", body)
        assert st == 200 and b["hits"]["total"]["value"] <= 1, (label, b)
        n.req("DELETE", "/_search/scroll", {"scroll_id": b["_scroll_id"]})
        # a body's scroll ids take precedence over the path's
        st, b = n.req("POST", "/lim/_search?scroll=1m", {})
        sid = b["_scroll_id"]
        st, b = n.req("DELETE", "/_search/scroll/not-a-scroll-id", {"scroll_id": [sid]})
        assert (st, b.get("num_freed")) == (200, 1), (label, b)


@test
def msearch_total_as_int_needs_exact_totals():
    # one search that cannot give an int total fails the whole _msearch,
    # before any runs, as ES parses it
    import json as _json
    for label, n in nodes():
        setup(n)
        body = "".join(_json.dumps(x) + "\n" for x in (
            {"index": "lim"}, {"query": {"match_all": {}}},
            {"index": "lim"}, {"query": {"match_all": {}}, "track_total_hits": 10}))
        b = n.req("POST", "/_msearch?rest_total_hits_as_int=true", body.encode(),
                  headers={"Content-Type": "application/x-ndjson"})
        error_is(b, 400, IAE, "[rest_total_hits_as_int] cannot be used if the tracking of "
                 "total hits is not accurate, got 10")
        st, b = n.req("POST", "/_msearch?rest_total_hits_as_int=true",
                      body.replace('"track_total_hits": 10', '"track_total_hits": true')
                      .encode(), headers={"Content-Type": "application/x-ndjson"})
        assert st == 200 and [isinstance(r["hits"]["total"], int) for r in b["responses"]] == [True, True], (label, b)


@test
def force_flush_must_wait():
    for label, n in nodes():
        setup(n)
        b = n.req("POST", "/lim/_flush?force=true&wait_if_ongoing=false")
        error_is(b, 400, "action_request_validation_exception")
        assert b[1]["error"]["reason"] == ("Validation Failed: 1: wait_if_ongoing must be true "
                                           "for a force flush;"), (label, b)
        st, _ = n.req("POST", "/lim/_flush?force=true")
        assert st == 200, label


@test
def single_index_op_on_an_alias_of_several():
    for label, n in nodes():
        for ix in ("sio1", "sio2"):
            n.req("DELETE", "/" + ix)
            n.req("PUT", "/" + ix, {"aliases": {"sio_both": {}}})
        n.req("PUT", "/sio1/_doc/1?refresh=true", {"a": 1})
        want = ("alias [sio_both] has more than one index associated with it [sio1, sio2], "
                "can't execute a single index op")
        for path in ("/sio_both/_doc/1", "/sio_both/_source/1"):
            error_is(n.req("GET", path), 400, IAE, want)
        st, b = n.req("POST", "/_mget", {"docs": [{"_index": "sio1", "_id": "1"},
                                                  {"_index": "sio_both", "_id": "1"},
                                                  {"_index": "nosuch_sio", "_id": "1"}]})
        assert b["docs"][0]["found"] is True, (label, b)
        assert b["docs"][1]["error"]["root_cause"][0]["type"] == IAE, (label, b)
        assert b["docs"][1]["error"]["root_cause"][0]["reason"] == want, (label, b)
        assert b["docs"][2]["error"]["root_cause"][0]["type"] == "index_not_found_exception", \
            (label, b)
        for ix in ("sio1", "sio2"):
            n.req("DELETE", "/" + ix)


@test
def typed_and_empty_mapping_names():
    for label, n in nodes():
        n.req("DELETE", "/tmn")
        typed = {"_doc": {"properties": {"f": {"type": "keyword"}}}}
        error_is(n.req("PUT", "/tmn", {"mappings": typed}), 400, IAE,
                 "The mapping definition cannot be nested under a type [_doc] unless "
                 "include_type_name is set to true.")
        error_is(n.req("PUT", "/tmn", {"mappings": {"properties": {"": {"type": "keyword"}}}}),
                 400, IAE, "field name cannot be an empty string")
        st, _ = n.req("PUT", "/tmn", {})
        assert st == 200, label
        error_is(n.req("PUT", "/tmn/_mapping", typed), 400, IAE,
                 "Types cannot be provided in put mapping requests, unless the "
                 "include_type_name parameter is set to true.")
        error_is(n.req("PUT", "/tmn/_mapping", {"properties": {"": {"type": "keyword"}}}), 400,
                 IAE, "field name cannot be an empty string")
        # a field named _doc beside others is a field
        st, b = n.req("PUT", "/tmn/_mapping", {"properties": {"x": {"type": "keyword"}}})
        assert st == 200, (label, b)
        n.req("DELETE", "/tmn")

if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
