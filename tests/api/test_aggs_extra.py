"""Aggregations added late (typed_keys, sampler, diversified_sampler,
geo_bounds, geo_centroid, geohash_grid, geotile_grid) on a solo node and a
3-node static cluster, each over an index of 3 shards. Expected buckets are
worked out by hand or by a small model over the test's own documents."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-aggs-extra-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown

MAPPING = {"properties": {
    "tag": {"type": "keyword"}, "n": {"type": "long"}, "price": {"type": "double"},
    "ts": {"type": "date"}, "loc": {"type": "geo_point"}, "ok": {"type": "boolean"},
    "title": {"type": "text"}}}

# (tag, n, price, ts, (lat, lon), ok, title)
DOCS = [
    ("a", 1, 1.5, "2024-01-01T10:00:00Z", (48.8566, 2.3522), True, "red fox"),
    ("a", 2, 2.5, "2024-01-01T11:00:00Z", (48.8606, 2.3376), False, "red red fox"),
    ("b", 3, 3.5, "2024-01-02T10:00:00Z", (51.5074, -0.1278), True, "blue fox"),
    ("b", 4, 4.5, "2024-01-03T10:00:00Z", (40.7128, -74.0060), True, "green"),
    ("c", 5, 5.5, "2024-01-05T10:00:00Z", (-33.8688, 151.2093), False, "red"),
    ("a", 6, 6.5, "2024-01-05T12:00:00Z", (35.6762, 139.6503), True, "fox fox fox"),
]
_ready = set()


def targets():
    out = []
    for label, n in (("solo", solo()), ("cluster", cluster()["node-1"])):
        if label not in _ready:
            st, b = n.req("PUT", "/ax", {"settings": {"number_of_shards": 3,
                                                      "number_of_replicas": 0},
                                         "mappings": MAPPING})
            eq(st, 200, label + " create: %s" % b)
            lines = []
            for i, (tag, num, price, ts, (lat, lon), ok, title) in enumerate(DOCS):
                lines.append({"index": {"_index": "ax", "_id": str(i + 1)}})
                lines.append({"tag": tag, "n": num, "price": price, "ts": ts,
                              "loc": {"lat": lat, "lon": lon}, "ok": ok, "title": title})
            st, b = n.bulk(lines, params="?refresh=true")
            eq((st, b.get("errors")), (200, False), label + " bulk: %s" % b)
            _ready.add(label)
        out.append((label, n))
    return out


def search(n, body, params=""):
    st, b = n.req("POST", "/ax/_search" + params, dict(body, size=0))
    if st != 200:
        raise AssertionError("search failed %d: %s" % (st, b))
    return b["aggregations"]


# ---- typed_keys ----

@test
def typed_keys_names():
    body = {"aggs": {
        "tags": {"terms": {"field": "tag"}, "aggs": {
            "avg_p": {"avg": {"field": "price"}},
            "pct": {"percentiles": {"field": "price", "percents": [50]}},
            "nums": {"terms": {"field": "n", "size": 1}},
            "top": {"top_hits": {"size": 1, "_source": False}}}},
        "prices": {"terms": {"field": "price", "size": 1}},
        "oks": {"terms": {"field": "ok"}},
        "none": {"terms": {"field": "nosuchfield"}},
        "card": {"cardinality": {"field": "tag"}},
        "vc": {"value_count": {"field": "n"}},
        "mx": {"max": {"field": "n"}},
        "st": {"stats": {"field": "n"}},
        "f": {"filter": {"term": {"tag": "a"}}, "aggs": {"s": {"sum": {"field": "n"}}}},
        "fs": {"filters": {"filters": {"x": {"term": {"tag": "b"}}}}},
        "r": {"range": {"field": "n", "ranges": [{"to": 3}]}},
        "dr": {"date_range": {"field": "ts", "ranges": [{"to": "2024-01-02"}]}},
        "comp": {"composite": {"sources": [{"t": {"terms": {"field": "tag"}}}]}},
        "days": {"date_histogram": {"field": "ts", "calendar_interval": "day"}, "aggs": {
            "sp": {"sum": {"field": "price"}},
            "d": {"derivative": {"buckets_path": "sp"}},
            "cs": {"cumulative_sum": {"buckets_path": "sp"}}}},
        "h": {"histogram": {"field": "n", "interval": 2}},
        "maxday": {"max_bucket": {"buckets_path": "days>sp"}},
        "avgday": {"avg_bucket": {"buckets_path": "days>sp"}},
        "statsday": {"stats_bucket": {"buckets_path": "days>sp"}},
        "pday": {"percentiles_bucket": {"buckets_path": "days>sp", "percents": [50]}},
        "mis": {"missing": {"field": "nosuchfield"}},
    }}
    want_top = ["avgday", "bucket_metrics#maxday", "card", "comp", "days", "dr", "f", "fs",
                "h", "mis", "mx", "none", "oks", "pday", "prices", "r", "st", "statsday",
                "tags", "vc"]
    typed = {"avgday": "simple_value", "maxday": "bucket_metrics", "card": "cardinality",
             "comp": "composite", "days": "date_histogram", "dr": "date_range", "f": "filter",
             "fs": "filters", "h": "histogram", "mis": "missing", "mx": "max",
             "none": "umterms", "oks": "lterms", "pday": "percentiles_bucket",
             "prices": "dterms", "r": "range", "st": "stats", "statsday": "stats_bucket",
             "tags": "sterms", "vc": "value_count"}
    del want_top
    for label, n in targets():
        plain = search(n, body)
        a = search(n, body, "?typed_keys=true")
        eq(sorted(a), sorted("%s#%s" % (typed[k], k) for k in typed), label + " top names")
        tags = a["sterms#tags"]["buckets"]
        eq([b["key"] for b in tags], ["a", "b", "c"], label + " tag keys")
        eq(sorted(k for k in tags[0] if "#" in k),
           ["avg#avg_p", "lterms#nums", "tdigest_percentiles#pct", "top_hits#top"],
           label + " sub-aggregation names")
        eq(tags[0]["avg#avg_p"], plain["tags"]["buckets"][0]["avg_p"], label + " values kept")
        eq(a["filter#f"]["sum#s"], {"value": 9.0}, label + " single-bucket sub")
        days = a["date_histogram#days"]["buckets"]
        eq([sorted(k for k in b if "#" in k) for b in days][:2],
           [["simple_value#cs", "sum#sp"], ["derivative#d", "simple_value#cs", "sum#sp"]],
           label + " parent pipelines typed")
        eq(days[1]["derivative#d"], {"value": -0.5}, label + " derivative value")
        eq(days[4]["simple_value#cs"], {"value": 24.0}, label + " cumulative_sum value")
        eq(a["bucket_metrics#maxday"], {"value": 12.0, "keys": ["2024-01-05T00:00:00.000Z"]},
           label + " max_bucket")
        eq(a["simple_value#avgday"], plain["avgday"], label + " avg_bucket")
        eq(a["stats_bucket#statsday"]["count"], 4, label + " stats_bucket")
        # without the parameter (or =false) the names stay plain
        eq(sorted(search(n, body, "?typed_keys=false")), sorted(typed), label + " false")


@test
def typed_keys_pipeline_reads_typed_tree():
    """Pipelines that read other pipelines and sub-aggregations through
    paths still resolve when the tree carries typed names."""
    body = {"aggs": {
        "tags": {"terms": {"field": "tag"}, "aggs": {
            "sp": {"sum": {"field": "price"}},
            "double": {"bucket_script": {"buckets_path": {"v": "sp"},
                                         "script": "params.v * 2"}},
            "keep": {"bucket_selector": {"buckets_path": {"v": "double"},
                                         "script": "params.v > 10"}}}},
        "sum_double": {"sum_bucket": {"buckets_path": "tags>double"}}}}
    for label, n in targets():
        a = search(n, body, "?typed_keys")
        b = a["sterms#tags"]["buckets"]
        # a: 1.5+2.5+6.5 = 10.5 → 21; b: 3.5+4.5 = 8 → 16; c: 5.5 → 11
        eq([(x["key"], x["simple_value#double"]["value"]) for x in b],
           [("a", 21.0), ("b", 16.0), ("c", 11.0)], label + " bucket_script typed")
        eq(a["simple_value#sum_double"], {"value": 48.0}, label + " sum_bucket over it")


@test
def typed_keys_msearch_and_template():
    for label, n in targets():
        lines = [{"index": "ax"}, {"size": 0, "aggs": {"m": {"min": {"field": "n"}}}}]
        body = "".join(__import__("json").dumps(l) + "\n" for l in lines)
        st, b = n.req("POST", "/_msearch?typed_keys=true", body,
                      {"Content-Type": "application/x-ndjson"})
        eq(st, 200, label + " msearch: %s" % b)
        eq(b["responses"][0]["aggregations"], {"min#m": {"value": 1.0}}, label + " msearch")
        st, b = n.req("POST", "/ax/_search/template?typed_keys=true",
                      {"source": {"size": 0, "aggs": {"m": {"max": {"field": "{{f}}"}}}},
                       "params": {"f": "n"}})
        eq((st, b.get("aggregations")), (200, {"max#m": {"value": 6.0}}), label + " template")


if __name__ == "__main__":
    run_tests(budget_s=120, teardown=teardown)
