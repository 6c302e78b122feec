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
    want_top = ["avgday", "bucket_metric_value#maxday", "card", "comp", "days", "dr", "f", "fs",
                "h", "mis", "mx", "none", "oks", "pday", "prices", "r", "st", "statsday",
                "tags", "vc"]
    typed = {"avgday": "simple_value", "maxday": "bucket_metric_value", "card": "cardinality",
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
        eq(a["bucket_metric_value#maxday"], {"value": 12.0, "keys": ["2024-01-05T00:00:00.000Z"]},
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


# ---- sampler, diversified_sampler ----

def per_shard(n, body):
    """The body's answer from each of the 3 shards alone."""
    out = []
    for i in range(3):
        st, b = n.req("POST", "/ax/_search?preference=_shards:%d" % i, body)
        eq(st, 200, "per-shard search: %s" % b)
        out.append(b)
    return out


@test
def sampler_best_docs_per_shard():
    q = {"match": {"title": "fox"}}
    for label, n in targets():
        # every doc fits: the sample is the whole match
        a = search(n, {"query": q, "aggs": {"s": {"sampler": {}, "aggs": {
            "t": {"terms": {"field": "tag"}}}}}})
        eq(a["s"]["doc_count"], 4, label + " sampler of everything")
        eq([(b["key"], b["doc_count"]) for b in a["s"]["t"]["buckets"]],
           [("a", 3), ("b", 1)], label + " sub terms over everything")
        # one doc per shard: the best hit of each shard
        tops = [r["hits"]["hits"][0] for r in per_shard(n, {"query": q, "size": 1})
                if r["hits"]["hits"]]
        want = {}
        for h in tops:
            t = DOCS[int(h["_id"]) - 1][0]
            want[t] = want.get(t, 0) + 1
        a = search(n, {"query": q, "aggs": {"s": {"sampler": {"shard_size": 1}, "aggs": {
            "t": {"terms": {"field": "tag"}}, "m": {"max": {"field": "n"}}}}}})
        eq(a["s"]["doc_count"], len(tops), label + " one per shard")
        eq(sorted((b["key"], b["doc_count"]) for b in a["s"]["t"]["buckets"]),
           sorted(want.items()), label + " sub terms of the best docs")
        eq(a["s"]["m"]["value"], float(max(DOCS[int(h["_id"]) - 1][1] for h in tops)),
           label + " max over the sample")
        # typed_keys, and a terms order path through the sampler
        a = search(n, {"aggs": {"t": {"terms": {"field": "tag", "order": {"s>m": "desc"}},
                                      "aggs": {"s": {"sampler": {"shard_size": 100},
                                                     "aggs": {"m": {"min": {"field": "n"}}}}}},
                                "d": {"diversified_sampler": {"field": "tag"}}}},
                   "?typed_keys=true")
        eq([(b["key"], b["sampler#s"]["min#m"]["value"]) for b in a["sterms#t"]["buckets"]],
           [("c", 5.0), ("b", 3.0), ("a", 1.0)], label + " ordered by s>m, typed")
        eq(list(a["sampler#d"]), ["doc_count"], label + " diversified typed as sampler")


@test
def diversified_sampler_caps_per_value():
    for label, n in targets():
        shards = per_shard(n, {"size": 0, "aggs": {"t": {"terms": {"field": "tag"}}}})
        distinct = sum(len(r["aggregations"]["t"]["buckets"]) for r in shards)
        capped2 = sum(min(b["doc_count"], 2) for r in shards
                      for b in r["aggregations"]["t"]["buckets"])
        a = search(n, {"aggs": {
            "d1": {"diversified_sampler": {"field": "tag"}, "aggs": {
                "t": {"terms": {"field": "tag"}}}},
            "d2": {"diversified_sampler": {"field": "tag", "max_docs_per_value": 2,
                                           "shard_size": 50}},
            "dn": {"diversified_sampler": {"field": "n", "shard_size": 2}}}})
        eq(a["d1"]["doc_count"], distinct, label + " one doc per tag per shard")
        for b in a["d1"]["t"]["buckets"]:
            eq(b["doc_count"] <= 3, True, label + " at most one per shard per tag")
        eq(a["d2"]["doc_count"], capped2, label + " two per tag per shard")
        want_n = sum(min(r["hits"]["total"]["value"], 2) for r in shards)
        eq(a["dn"]["doc_count"], want_n, label + " numeric field, shard_size 2")


@test
def sampler_refusals():
    for label, n in targets():
        for body, part in (
                ({"sampler": {"shard_size": 0}}, "[shard_size] must be greater than 0"),
                ({"sampler": {"field": "tag"}}, "unknown field [field]"),
                ({"diversified_sampler": {}}, "Required one of fields [field, script]"),
                ({"diversified_sampler": {"field": "tag", "max_docs_per_value": 0}},
                 "[max_docs_per_value] must be greater than 0")):
            r = n.req("POST", "/ax/_search", {"size": 0, "aggs": {"x": body}})
            eq(r[0], 400, label + " %s: %s" % (body, r[1]))
            eq(part in r[1]["error"]["reason"], True, label + " reason %s" % r[1])
        st, b = n.req("PUT", "/axmv", {"mappings": {"properties": {"tag": {"type": "keyword"}}}})
        eq(st, 200, label + " create axmv: %s" % b)
        st, b = n.req("PUT", "/axmv/_doc/1?refresh=true", {"tag": ["x", "y"]})
        eq(st, 201, label + " multi-valued doc: %s" % b)
        st, b = n.req("POST", "/axmv/_search", {"size": 0, "aggs": {
            "d": {"diversified_sampler": {"field": "tag"}}}})
        eq((st, "Sample diversifying key must be a single valued-field" in str(b)), (400, True),
           label + " multi-valued diversifying field: %s" % b)


# ---- geo ----

LAT_SCALE = 4294967296.0 / 180.0
LON_SCALE = 4294967296.0 / 360.0


def quantize(lat, lon):
    """Lucene's encoding and back, as the column stores a point."""
    a = min(math.floor(lat * LAT_SCALE), 2147483647)
    o = min(math.floor(lon * LON_SCALE), 2147483647)
    return a / LAT_SCALE, o / LON_SCALE


def geohash(lat, lon, level):
    """Plain bisection geohash (an independent model of the cells)."""
    b32 = "0123456789bcdefghjkmnpqrstuvwxyz"
    lo = [-90.0, 90.0]
    ln = [-180.0, 180.0]
    bits, even, out, ch = 0, True, "", 0
    while len(out) < level:
        rng, v = (ln, lon) if even else (lo, lat)
        mid = (rng[0] + rng[1]) / 2
        ch <<= 1
        if v >= mid:
            ch |= 1
            rng[0] = mid
        else:
            rng[1] = mid
        even = not even
        bits += 1
        if bits == 5:
            out += b32[ch]
            bits, ch = 0, 0
    return out


def geotile(lat, lon, z):
    tiles = 1 << z
    x = int(math.floor((lon + 180) / 360 * tiles))
    s = math.sin(math.radians(lat))
    y = int(math.floor((0.5 - math.log((1 + s) / (1 - s)) / (4 * math.pi)) * tiles))
    return "%d/%d/%d" % (z, min(max(x, 0), tiles - 1), min(max(y, 0), tiles - 1))


def grid_model(keys):
    """ES's order: doc_count desc, then the cell's long encoding desc
    (string order for same-length geohashes; x, then y for tiles)."""
    cnt = {}
    for k in keys:
        cnt[k] = cnt.get(k, 0) + 1

    def sk(k):
        if "/" in k:
            z, x, y = map(int, k.split("/"))
            return (-cnt[k], -x, -y)
        return (-cnt[k], tuple(-ord(c) for c in k))
    return [{"key": k, "doc_count": cnt[k]} for k in sorted(cnt, key=sk)]


@test
def geo_bounds_and_centroid():
    pts = [quantize(*d[4]) for d in DOCS]
    for label, n in targets():
        a = search(n, {"aggs": {"b": {"geo_bounds": {"field": "loc"}},
                                "c": {"geo_centroid": {"field": "loc"}}}})
        eq(a["b"], {"bounds": {
            "top_left": {"lat": max(p[0] for p in pts), "lon": min(p[1] for p in pts)},
            "bottom_right": {"lat": min(p[0] for p in pts),
                             "lon": max(p[1] for p in pts)}}}, label + " bounds")
        c = a["c"]
        eq(c["count"], 6, label + " centroid count")
        eq(abs(c["location"]["lat"] - sum(p[0] for p in pts) / 6) < 1e-9, True,
           label + " centroid lat %r" % c)
        eq(abs(c["location"]["lon"] - sum(p[1] for p in pts) / 6) < 1e-9, True,
           label + " centroid lon %r" % c)
        # Tokyo, New York, Sydney: narrower across the antimeridian
        q = {"terms": {"n": [4, 5, 6]}}
        sub = [pts[3], pts[4], pts[5]]
        a = search(n, {"query": q, "aggs": {
            "b": {"geo_bounds": {"field": "loc"}},
            "nw": {"geo_bounds": {"field": "loc", "wrap_longitude": False}}}})
        eq(a["b"]["bounds"]["top_left"]["lon"], pts[5][1], label + " wrapped left (Tokyo)")
        eq(a["b"]["bounds"]["bottom_right"]["lon"], pts[3][1], label + " wrapped right (NY)")
        eq(a["nw"]["bounds"]["top_left"]["lon"], min(p[1] for p in sub), label + " no wrap")
        # nothing matched
        a = search(n, {"query": {"term": {"tag": "zzz"}}, "aggs": {
            "b": {"geo_bounds": {"field": "loc"}}, "c": {"geo_centroid": {"field": "loc"}}}},
            "?typed_keys")
        eq(a, {"geo_bounds#b": {}, "geo_centroid#c": {"count": 0}}, label + " empty, typed")
        # per tag
        a = search(n, {"aggs": {"t": {"terms": {"field": "tag"}, "aggs": {
            "c": {"geo_centroid": {"field": "loc"}}}}}})
        eq(a["t"]["buckets"][2]["c"], {"location": {"lat": pts[4][0], "lon": pts[4][1]},
                                       "count": 1}, label + " centroid of one point")


@test
def geohash_and_geotile_grids():
    raw = [d[4] for d in DOCS]
    pts = [quantize(*p) for p in raw]
    for label, n in targets():
        for prec in (1, 3, 5):
            a = search(n, {"aggs": {"g": {"geohash_grid": {"field": "loc",
                                                           "precision": prec}}}})
            eq(a["g"]["buckets"], grid_model([geohash(la, lo, prec) for la, lo in raw]),
               label + " geohash precision %d" % prec)
        for z in (0, 2, 7):
            a = search(n, {"aggs": {"g": {"geotile_grid": {"field": "loc", "precision": z}}}})
            eq(a["g"]["buckets"], grid_model([geotile(la, lo, z) for la, lo in pts]),
               label + " geotile zoom %d" % z)
        # size, bounds, sub-aggregations, typed_keys
        a = search(n, {"aggs": {"g": {"geohash_grid": {"field": "loc", "precision": 5,
                                                       "size": 2},
                                      "aggs": {"m": {"max": {"field": "n"}}}},
                                "bb": {"geohash_grid": {"field": "loc", "bounds": {
                                    "top_left": {"lat": 60, "lon": -10},
                                    "bottom_right": "40, 10"}}},
                                "t": {"geotile_grid": {"field": "loc", "precision": 1},
                                      "aggs": {"c": {"geo_centroid": {"field": "loc"}}}}}},
                   "?typed_keys=true")
        g = a["geohash_grid#g"]["buckets"]
        eq([(b["key"], b["doc_count"], b["max#m"]["value"]) for b in g],
           [("u09tv", 2, 2.0), ("xn76c", 1, 6.0)], label + " size 2 with a sub")
        eq(a["geohash_grid#bb"]["buckets"], [{"key": "u09tv", "doc_count": 2},
                                             {"key": "gcpvj", "doc_count": 1}],
           label + " bounds")
        t = a["geotile_grid#t"]["buckets"]
        eq(sum(b["doc_count"] for b in t), 6, label + " tiles hold every point")
        eq("geo_centroid#c" in t[0], True, label + " typed sub of a tile")


@test
def geo_refusals():
    for label, n in targets():
        for body, part in (
                ({"geohash_grid": {"field": "loc", "precision": 13}},
                 "Invalid geohash aggregation precision of 13. Must be between 1 and 12."),
                ({"geotile_grid": {"field": "loc", "precision": 30}},
                 "Invalid geotile_grid precision of 30. Must be between 0 and 29."),
                ({"geohash_grid": {"field": "loc", "size": 0}},
                 "[size] must be greater than 0"),
                ({"geohash_grid": {"field": "loc", "precision": "1km"}},
                 "not supported by Shoal"),
                ({"geo_bounds": {"field": "loc", "nope": 1}}, "unknown field [nope]"),
                ({"geo_bounds": {"field": "tag"}},
                 "Field [tag] of type [keyword] is not supported for aggregation [geo_bounds]"),
                ({"geo_centroid": {"field": "n"}},
                 "Field [n] of type [long] is not supported for aggregation [geo_centroid]"),
                ({"avg": {"field": "loc"}},
                 "Field [loc] of type [geo_point] is not supported for aggregation [avg]")):
            st, b = n.req("POST", "/ax/_search", {"size": 0, "aggs": {"x": body}})
            eq(st, 400, label + " %s: %s" % (body, b))
            eq(part in str(b["error"]), True, label + " reason: %s" % b)


@test
def geo_grids_at_the_poles():
    """The poles and the antimeridian: cells clamp to the grid's edge."""
    for label, n in targets():
        st, b = n.req("PUT", "/axpole", {"mappings": {"properties": {
            "loc": {"type": "geo_point"}}}})
        eq(st, 200, label + " create: %s" % b)
        lines = []
        for i, (la, lo) in enumerate([(-90, -180), (90, 180), (0, 0)]):
            lines += [{"index": {"_index": "axpole", "_id": str(i)}}, {"loc": [lo, la]}]
        # several points: a doc counts once per cell
        lines += [{"index": {"_index": "axpole", "_id": "m"}},
                  {"loc": [[0, 0], [0.001, 0.001], [100, 10]]}]
        st, b = n.bulk(lines, params="?refresh=true")
        eq((st, b.get("errors")), (200, False), label + " bulk")
        st, b = n.req("POST", "/axpole/_search", {"size": 0, "aggs": {
            "t": {"geotile_grid": {"field": "loc", "precision": 2}},
            "h": {"geohash_grid": {"field": "loc", "precision": 1}},
            "b": {"geo_bounds": {"field": "loc"}}}})
        eq(st, 200, label + " search: %s" % b)
        a = b["aggregations"]
        eq(sorted((x["key"], x["doc_count"]) for x in a["t"]["buckets"]),
           [("2/0/3", 1), ("2/2/1", 1), ("2/2/2", 2), ("2/3/0", 1), ("2/3/1", 1)],
           label + " tiles")
        eq(sorted((x["key"], x["doc_count"]) for x in a["h"]["buckets"]),
           [("0", 1), ("s", 2), ("w", 1), ("z", 1)], label + " geohashes")
        eq(a["b"]["bounds"]["bottom_right"]["lat"], -90.0, label + " bottom")


# ---- multi_terms ----

def mt_model(fields, size=10, order="count", min_doc_count=1):
    """Buckets of (field values) combinations over DOCS: count desc then key
    asc (order="count"), or key asc (order="key")."""
    idx = {"tag": 0, "n": 1, "price": 2, "ok": 5}
    cnt = {}
    for d in DOCS:
        k = tuple(d[idx[f]] for f in fields)
        cnt[k] = cnt.get(k, 0) + 1
    keys = sorted(cnt, key=(lambda k: (-cnt[k], k)) if order == "count" else (lambda k: k))
    keys = [k for k in keys if cnt[k] >= min_doc_count]

    def text(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)
    out = [{"key": list(k), "key_as_string": "|".join(text(v) for v in k),
            "doc_count": cnt[k]} for k in keys[:size]]
    return out, sum(cnt[k] for k in keys[size:])


@test
def multi_terms_buckets():
    for label, n in targets():
        for fields, size, order in ((["tag", "ok"], 10, "count"), (["tag", "ok"], 2, "count"),
                                    (["ok", "tag"], 10, "key"), (["tag", "price"], 3, "key")):
            body = {"multi_terms": {"terms": [{"field": f} for f in fields], "size": size}}
            if order == "key":
                body["multi_terms"]["order"] = {"_key": "asc"}
            a = search(n, {"aggs": {"m": body}})
            want, other = mt_model(fields, size, order)
            eq(a["m"]["buckets"], want, label + " %s size %d by %s" % (fields, size, order))
            eq(a["m"]["sum_other_doc_count"], other, label + " other %s" % fields)
        # min_doc_count, a sub-aggregation, an order by it, typed_keys, a pipeline
        a = search(n, {"aggs": {"m": {
            "multi_terms": {"terms": [{"field": "tag"}, {"field": "ok"}],
                            "min_doc_count": 2, "order": [{"s": "desc"}]},
            "aggs": {"s": {"sum": {"field": "n"}},
                     "half": {"bucket_script": {"buckets_path": {"v": "s"},
                                                "script": "params.v / 2"}}}}}},
            "?typed_keys=true")
        b = a["multi_terms#m"]["buckets"]
        # (a, true): docs 1, 6 → n 7; (b, true): docs 3, 4 → n 7; tie on 7 → key asc
        eq([(x["key"], x["doc_count"], x["sum#s"]["value"], x["simple_value#half"]["value"])
            for x in b], [(["a", True], 2, 7.0, 3.5), (["b", True], 2, 7.0, 3.5)],
           label + " min_doc_count, order by sub, typed")
        # missing: a doc without the field joins under the missing value
        a = search(n, {"aggs": {"m": {"multi_terms": {"terms": [
            {"field": "tag"}, {"field": "nosuch", "missing": "none"}]}}}})
        eq([(x["key"], x["doc_count"]) for x in a["m"]["buckets"]],
           [(["a", "none"], 3), (["b", "none"], 2), (["c", "none"], 1)], label + " missing")
        a = search(n, {"aggs": {"m": {"multi_terms": {"terms": [
            {"field": "tag"}, {"field": "nosuch"}]}}}})
        eq(a["m"]["buckets"], [], label + " a field without values leaves docs out")
        # dates: epoch millis in key, formatted in key_as_string
        a = search(n, {"query": {"term": {"n": 3}}, "aggs": {"m": {"multi_terms": {
            "terms": [{"field": "ts"}, {"field": "tag"}]}}}})
        eq(a["m"]["buckets"], [{"key": [1704189600000, "b"],
                                "key_as_string": "2024-01-02T10:00:00.000Z|b",
                                "doc_count": 1}], label + " date key")


@test
def multi_terms_refusals():
    for label, n in targets():
        for body, part in (
                ({"terms": [{"field": "tag"}]}, "must be present and have at least 2 fields"),
                ({"terms": [{"field": "tag"}, {"field": "n"}], "size": 0},
                 "[size] must be greater than 0"),
                ({"terms": [{"field": "tag"}, {}]}, "Required one of fields [field, script]"),
                ({"terms": [{"field": "tag"}, {"field": "n"}], "order": {"zz": "asc"}},
                 "Invalid aggregator order path [zz]"),
                ({"terms": [{"field": "tag"}, {"field": "n"}], "bogus": 1},
                 "unknown field [bogus]")):
            st, b = n.req("POST", "/ax/_search", {"size": 0, "aggs": {"x": {"multi_terms": body}}})
            # a bad order path is ES's AggregationExecutionException: a 500
            eq(st, 500 if "order path" in part else 400, label + " %s: %s" % (body, b))
            eq(part in b["error"]["root_cause"][0]["reason"], True, label + " reason: %s" % b)


# ---- auto_date_histogram ----

LADDER = [("s", 1000, [1, 5, 10, 30]), ("m", 60000, [1, 5, 10, 30]),
          ("h", 3600000, [1, 3, 12]), ("d", 86400000, [1, 7]),
          ("M", 30 * 86400000, [1, 3]), ("y", 365 * 86400000, [1, 5, 10, 20, 50, 100])]


def epoch_ms(ts):
    import datetime
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc)
    return int(d.timestamp() * 1000)


def adh_round(idx, t):
    import datetime
    if idx <= 3:
        step = LADDER[idx][1]
        return t // step * step
    d = datetime.datetime.fromtimestamp(t / 1000, datetime.timezone.utc)
    d = d.replace(month=1 if idx == 5 else d.month, day=1, hour=0, minute=0, second=0)
    return int(d.timestamp() * 1000)


def adh_next(idx, k):
    import datetime
    if idx <= 3:
        return k + LADDER[idx][1]
    d = datetime.datetime.fromtimestamp(k / 1000, datetime.timezone.utc)
    m = d.month - 1 + (12 if idx == 5 else 1)
    return int(d.replace(year=d.year + m // 12, month=m % 12 + 1).timestamp() * 1000)


def adh_model(times, target, min_idx=0):
    """A single shard holding every doc, then ES's final reduce."""
    idx = min_idx
    while True:
        keys = {}
        for t in times:
            k = adh_round(idx, t)
            keys[k] = keys.get(k, 0) + 1
        mx = LADDER[idx][2][-1]
        span = max(keys) - min(keys)
        if idx == 5 or (len(keys) <= target * mx and span <= target * mx * LADDER[idx][1]):
            break
        idx += 1
    k = min(keys)
    while k < max(keys):
        keys.setdefault(k, 0)
        k = adh_next(idx, k)
    while len(keys) > target * LADDER[idx][2][-1] and idx < 5:
        idx += 1
        nk = {}
        for k, c in keys.items():
            nk[adh_round(idx, k)] = nk.get(adh_round(idx, k), 0) + c
        keys = nk
    ks = sorted(keys)
    inner = 1
    if len(ks) > target:
        for m in LADDER[idx][2]:
            if (len(ks) + m - 1) // m <= target:
                inner = m
                break
    out = [(ks[i], sum(keys[k] for k in ks[i:i + inner])) for i in range(0, len(ks), inner)]
    return out, "%d%s" % (inner, LADDER[idx][0])


@test
def auto_date_histogram_intervals():
    times = [epoch_ms(d[3]) for d in DOCS]
    for label, n in targets():
        for target, mi in ((10, None), (3, None), (1, None), (10, "day"), (2, "month"),
                           (200, None), (40, "minute")):
            body = {"field": "ts", "buckets": target}
            if mi:
                body["minimum_interval"] = mi
            a = search(n, {"aggs": {"h": {"auto_date_histogram": body}}})["h"]
            want, interval = adh_model(times, target, [x[0] for x in LADDER].index(
                {"day": "d", "month": "M", "minute": "m"}[mi]) if mi else 0)
            eq(a["interval"], interval, label + " interval for %s" % body)
            eq([(b["key"], b["doc_count"]) for b in a["buckets"]], want,
               label + " buckets for %s" % body)
        eq(adh_model(times, 10), (adh_model(times, 10)[0], "12h"), "model sanity")
        # key_as_string, a sub-aggregation summed over merged buckets, typed_keys
        a = search(n, {"aggs": {"h": {"auto_date_histogram": {"field": "ts", "buckets": 3},
                                      "aggs": {"s": {"sum": {"field": "n"}},
                                               "t": {"terms": {"field": "tag"}}}}}},
                   "?typed_keys=true")["auto_date_histogram#h"]
        t = a["buckets"][0].pop("sterms#t")
        eq(a, {"buckets": [{"key_as_string": "2024-01-01T00:00:00.000Z",
                            "key": 1704067200000, "doc_count": 6,
                            "sum#s": {"value": 21.0}}], "interval": "7d"}, label + " 7d")
        eq([(b["key"], b["doc_count"]) for b in t["buckets"]], [("a", 3), ("b", 2), ("c", 1)],
           label + " terms under re-rounded buckets")
        # a time zone moves the day boundaries; format
        a = search(n, {"aggs": {"h": {"auto_date_histogram": {
            "field": "ts", "buckets": 10, "minimum_interval": "day", "time_zone": "+05:00",
            "format": "yyyy-MM-dd"}}}})["h"]
        eq([(b["key_as_string"], b["key"], b["doc_count"]) for b in a["buckets"]][:2],
           [("2024-01-01", 1704049200000, 2), ("2024-01-02", 1704135600000, 1)],
           label + " time_zone")
        eq(a["interval"], "1d", label + " time_zone interval")
        # nothing matched
        a = search(n, {"query": {"term": {"tag": "zzz"}},
                       "aggs": {"h": {"auto_date_histogram": {"field": "ts"}}}})["h"]
        eq(a, {"buckets": [], "interval": "1s"}, label + " empty")


@test
def auto_date_histogram_refusals():
    for label, n in targets():
        for body, part in (
                ({"field": "ts", "buckets": 0}, "buckets must be greater than 0 for [x]"),
                ({"field": "ts", "minimum_interval": "week"}, "minimum_interval must be one of"),
                ({"field": "ts", "time_zone": "Mars/Olympus"}, "Mars/Olympus"),
                ({"field": "ts", "interval": "1d"}, "unknown field [interval]"),
                ({"field": "tag"}, "Field [tag] of type [keyword] is not supported")):
            st, b = n.req("POST", "/ax/_search",
                          {"size": 0, "aggs": {"x": {"auto_date_histogram": body}}})
            eq(st, 400, label + " %s: %s" % (body, b))
            eq(part in b["error"]["reason"], True, label + " reason: %s" % b)


# ---- variable_width_histogram ----

def vwh_model(values, buckets):
    """Every value its own cluster (no shard merges at these sizes), then
    the reduce: closest centroids merge, overlapping bounds meet halfway."""
    cl = {}
    for v in values:
        c = cl.setdefault(v, [v, v, 0.0, 0])
        c[2] += v
        c[3] += 1
    cl = sorted(cl.values(), key=lambda c: (c[2] / c[3], c[0]))
    while len(cl) > buckets:
        i = min(range(len(cl) - 1), key=lambda i: (cl[i + 1][2] / cl[i + 1][3] - cl[i][2] / cl[i][3], i))
        a, b = cl[i], cl.pop(i + 1)
        cl[i] = [min(a[0], b[0]), max(a[1], b[1]), a[2] + b[2], a[3] + b[3]]
    return [{"min": c[0], "key": c[2] / c[3], "max": c[1], "doc_count": c[3]} for c in cl]


@test
def variable_width_histogram_buckets():
    for label, n in targets():
        for field, col, buckets in (("n", 1, 3), ("n", 1, 2), ("n", 1, 10), ("price", 2, 4)):
            vals = [float(d[col]) for d in DOCS]
            a = search(n, {"aggs": {"v": {"variable_width_histogram": {
                "field": field, "buckets": buckets}}}})
            eq(a["v"]["buckets"], vwh_model(vals, buckets),
               label + " %s buckets %d" % (field, buckets))
        # shards merging their own clusters (shard_size 1): one bucket of everything
        a = search(n, {"aggs": {"v": {"variable_width_histogram": {
            "field": "n", "buckets": 1, "shard_size": 1, "initial_buffer": 1},
            "aggs": {"t": {"terms": {"field": "tag"}}}}}}, "?typed_keys")
        b = a["variable_width_histogram#v"]["buckets"]
        eq([(x["min"], x["key"], x["max"], x["doc_count"]) for x in b], [(1.0, 3.5, 6.0, 6)],
           label + " shard-side merges")
        eq([(t["key"], t["doc_count"]) for t in b[0]["sterms#t"]["buckets"]],
           [("a", 3), ("b", 2), ("c", 1)], label + " sub-aggregation, typed")


@test
def variable_width_histogram_refusals():
    for label, n in targets():
        for body, part in (
                ({"field": "n", "buckets": 0}, "buckets must be greater than [0] for [x]"),
                ({"field": "n", "buckets": 10, "shard_size": 5}, "shard_size must be at least"),
                ({"field": "n", "buckets": 10, "initial_buffer": 5},
                 "initial_buffer must be at least"),
                ({"field": "tag"}, "Field [tag] of type [keyword] is not supported"),
                ({"field": "n", "interval": 3}, "unknown field [interval]")):
            st, b = n.req("POST", "/ax/_search",
                          {"size": 0, "aggs": {"x": {"variable_width_histogram": body}}})
            eq(st, 400, label + " %s: %s" % (body, b))
            eq(part in b["error"]["reason"], True, label + " reason: %s" % b)



# ---- median_absolute_deviation ----

@test
def median_absolute_deviation_values():
    # n is 1..6: median 3.5, distances 2.5 1.5 .5 .5 1.5 2.5, their median 1.5;
    # tag a holds 1, 2, 6: median 2, distances 1 0 4, their median 1
    for label, n in targets():
        a = search(n, {"aggs": {
            "mad": {"median_absolute_deviation": {"field": "n"}},
            "madp": {"median_absolute_deviation": {"field": "price", "compression": 500}},
            "none": {"median_absolute_deviation": {"field": "nosuchfield"}},
            "miss": {"median_absolute_deviation": {"field": "nosuchfield", "missing": 7}},
            "tags": {"terms": {"field": "tag", "order": {"m": "desc"}},
                     "aggs": {"m": {"median_absolute_deviation": {"field": "n"}}}}}},
            "?typed_keys=true")
        eq(a["median_absolute_deviation#mad"], {"value": 1.5}, label + " n")
        eq(a["median_absolute_deviation#madp"], {"value": 1.5}, label + " price")
        eq(a["median_absolute_deviation#none"], {"value": None}, label + " unmapped")
        eq(a["median_absolute_deviation#miss"], {"value": 0.0}, label + " missing")
        got = [(b["key"], b["median_absolute_deviation#m"]["value"])
               for b in a["sterms#tags"]["buckets"]]
        eq(got, [("a", 1.0), ("b", 0.5), ("c", 0.0)], label + " per tag")
        for comp in (0, -1):
            st, b = n.req("POST", "/ax/_search", {"size": 0, "aggs": {"mad": {
                "median_absolute_deviation": {"field": "n", "compression": comp}}}})
            eq(st, 400, label + " compression %s: %s" % (comp, b))
            eq("[compression] must be greater than 0. Found [%.1f] in [mad]" % comp
               in b["error"]["reason"], True, label + " reason: %s" % b)


@test
def metric_parameter_messages():
    # numbers in messages as Java prints a double; a value that does not
    # parse is an x_content_parse_exception, as ES's object parser says
    for label, n in targets():
        for agg, part in (
                ({"extended_stats": {"field": "n", "sigma": -1}},
                 "[sigma] must be greater than or equal to 0. Found [-1.0] in [x]"),
                ({"percentiles": {"field": "n", "tdigest": {"compression": -1}}},
                 "[compression] must be greater than or equal to 0. Found [-1.0] in [x]")):
            error_is(n.req("POST", "/ax/_search", {"size": 0, "aggs": {"x": agg}}), 400,
                     "illegal_argument_exception", part)
        error_is(n.req("POST", "/ax/_search", {"size": 0, "aggs": {"x": {"extended_stats": {
            "field": "n", "sigma": "foo"}}}}), 400, "x_content_parse_exception",
            "[extended_stats] failed to parse field [sigma]")


@test
def percentiles_interpolate_as_es():
    # t-digest 3.2 (ES 7.10): the q * count-th unit of weight between
    # centroid centres, so n = 1..6 gives 2.0 at 25% (sorted-value
    # interpolation would say 2.25) and 3.5 at 50%
    for label, n in targets():
        a = search(n, {"aggs": {"p": {"percentiles": {"field": "n",
                                                      "percents": [0, 10, 25, 50, 95, 100]}}}})
        eq(a["p"]["values"], {"0.0": 1.0, "10.0": 1.1, "25.0": 2.0, "50.0": 3.5, "95.0": 6.0,
                              "100.0": 6.0}, label + " percentiles")


@test
def percentile_ranks_agree_with_percentiles():
    # t-digest 3.2's cdf (ES 7.10): value i of 1..6 holds [i - 0.5, i + 0.5)
    # and the walk ends at the next-to-last value, so 5.6 ranks at 100; a
    # rank of a percentile's value gives the percent back
    for label, n in targets():
        a = search(n, {"aggs": {"r": {"percentile_ranks": {
            "field": "n", "values": [0, 1, 2, 3.5, 5, 5.6, 6]}}}})
        got = {k: round(v, 9) for k, v in a["r"]["values"].items()}
        eq(got, {"0.0": 0.0, "1.0": round(100 / 12, 9), "2.0": 25.0, "3.5": 50.0,
                 "5.0": 75.0, "5.6": 100.0, "6.0": 100.0}, label + " ranks")


@test
def hdr_percentiles_and_ranks():
    # HdrHistogram with 3 digits keeps 1024 values per binary order of
    # magnitude: 2 holds [2, 2 + 2^-9), 6 holds [6, 6 + 2^-8); an answer is
    # its range's highest value, less the last unit (the lowest value, 1,
    # is unit 1024: 2^-10); a percentile's count is rounded to the nearest
    for label, n in targets():
        a = search(n, {"aggs": {
            "p": {"percentiles": {"field": "n", "percents": [0, 25, 50, 99, 100],
                                  "hdr": {}}},
            "p0": {"percentiles": {"field": "n", "percents": [25, 50, 99],
                                   "hdr": {"number_of_significant_value_digits": 0.5}}},
            "r": {"percentile_ranks": {"field": "price", "values": [1, 2.4999, 2.5, 7],
                                       "hdr": {"number_of_significant_value_digits": 3}}},
            "r0": {"percentile_ranks": {"field": "n", "values": [0.5, 3.5, 4],
                                        "hdr": {"number_of_significant_value_digits": 0}}}}},
            params="?typed_keys")
        eq(a["hdr_percentiles#p"]["values"],
           {"0.0": 1.0, "25.0": 2.0009765625, "50.0": 3.0009765625, "99.0": 6.0029296875,
            "100.0": 6.0029296875}, label + " percentiles")
        # 0 digits (0.5 read as an int, as ES does): one value per binary
        # order of magnitude, [2, 4) and [4, 8)
        eq(a["hdr_percentiles#p0"]["values"], {"25.0": 3.0, "50.0": 3.0, "99.0": 7.0},
           label + " 0 digits")
        eq(a["hdr_percentile_ranks#r"]["values"],
           {"1.0": 0.0, "2.4999": 100 / 6, "2.5": 200 / 6, "7.0": 100.0}, label + " ranks")
        eq(a["hdr_percentile_ranks#r0"]["values"], {"0.5": 0.0, "3.5": 50.0, "4.0": 100.0},
           label + " ranks, 0 digits")
        for digits in (-1, 6):
            st, b = n.req("POST", "/ax/_search", {"size": 0, "aggs": {"p": {"percentiles": {
                "field": "n", "hdr": {"number_of_significant_value_digits": digits}}}}})
            error_is((st, b), 400, "illegal_argument_exception",
                     "[numberOfSignificantValueDigits] must be between 0 and 5")
        # HdrHistogram refuses a negative value: the shard fails, as in ES
        st, b = n.req("POST", "/ax/_search", {"size": 0, "aggs": {"p": {"percentiles": {
            "field": "nosuch", "missing": -1, "hdr": {}}}}})
        eq((st, b["error"]["root_cause"][0]["type"]),
           (500, "array_index_out_of_bounds_exception"), label + " negative: %s" % b)


@test
def date_range_in_the_fields_format():
    # without its own "format", date_range reads its bounds (numbers too)
    # and writes its keys in the field's: epoch_second here
    for label, n in (("solo", solo()), ("cluster", cluster()["node-1"])):
        n.req("DELETE", "/axdr")
        st, b = n.req("PUT", "/axdr", {
            "settings": {"number_of_shards": 3, "number_of_replicas": 0},
            "mappings": {"properties": {"d": {"type": "date", "format": "epoch_second"}}}})
        eq(st, 200, label + " create: %s" % b)
        lines = []
        for i, v in enumerate((1000, 2000, 3000)):
            lines += [{"index": {"_index": "axdr", "_id": str(i)}}, {"d": v}]
        st, b = n.bulk(lines, params="?refresh=true")
        eq((st, b.get("errors")), (200, False), label + " bulk: %s" % b)
        st, b = n.req("POST", "/axdr/_search", {"size": 0, "aggs": {
            "r": {"date_range": {"field": "d", "ranges": [{"from": 1000, "to": 3000},
                                                          {"from": "3000", "to": 4000}]}},
            "own": {"date_range": {"field": "d", "format": "epoch_millis",
                                   "ranges": [{"from": 1000000, "to": 3000000}]}}}})
        eq(st, 200, label + ": %s" % b)
        eq([(x["key"], x["from"], x["from_as_string"], x["to"], x["doc_count"])
            for x in b["aggregations"]["r"]["buckets"]],
           [("1000-3000", 1000000, "1000", 3000000, 2), ("3000-4000", 3000000, "3000", 4000000, 1)],
           label + " field format")
        eq([(x["key"], x["doc_count"]) for x in b["aggregations"]["own"]["buckets"]],
           [("1000000-3000000", 2)], label + " own format")
        n.req("DELETE", "/axdr")


@test
def aggregation_on_an_object_field_is_unmapped():
    # an object has no field type: ES aggregates it as an unmapped field
    # (the per-shard mapping checks refuse text, not objects)
    for label, n in (("solo", solo()), ("cluster", cluster()["node-1"])):
        n.req("DELETE", "/axob")
        st, b = n.req("PUT", "/axob", {
            "settings": {"number_of_shards": 2, "number_of_replicas": 0},
            "mappings": {"properties": {"o": {"properties": {"a": {"type": "keyword"}}}}}})
        eq(st, 200, label + " create: %s" % b)
        st, b = n.bulk([{"index": {"_index": "axob", "_id": "1"}}, {"o": {"a": "x"}}],
                       params="?refresh=true")
        st, b = n.req("POST", "/axob/_search", {"size": 0, "aggs": {
            "t": {"terms": {"field": "o"}}, "m": {"max": {"field": "o"}}}})
        eq((st, b.get("aggregations", {}).get("t", {}).get("buckets")), (200, []),
           label + ": %s" % b)
        n.req("DELETE", "/axob")


@test
def terms_ordered_by_a_single_bucket_doc_count_key():
    # "f.doc_count" names a single bucket's count, as "f" does (ES 7.7+);
    # ties go by key: b has 2 docs with n >= 3, a and c one each
    for label, n in targets():
        for path in ("f.doc_count", "f"):
            a = search(n, {"aggs": {"t": {
                "terms": {"field": "tag", "order": {path: "desc"}},
                "aggs": {"f": {"filter": {"range": {"n": {"gte": 3}}}}}}}})
            eq([(b["key"], b["f"]["doc_count"]) for b in a["t"]["buckets"]],
               [("b", 2), ("a", 1), ("c", 1)], "%s %s" % (label, path))


@test
def missing_agg_with_missing_value():
    # with "missing", every document has a value of the field: none counts
    for label, n in targets():
        a = search(n, {"aggs": {"m": {"missing": {"field": "nosuch", "missing": 1}},
                                "m0": {"missing": {"field": "nosuch"}}}})
        eq((a["m"]["doc_count"], a["m0"]["doc_count"]), (0, 6), label)


@test
def date_histogram_time_order():
    # "_time" is ES 7's deprecated name for "_key" in a date_histogram order
    for label, n in targets():
        keys = {}
        for k in ("_time", "_key"):
            a = search(n, {"aggs": {"h": {"date_histogram": {
                "field": "ts", "calendar_interval": "day", "order": {k: "desc"}}}}})
            keys[k] = [b["key"] for b in a["h"]["buckets"]]
        eq(keys["_time"], keys["_key"], label)
        eq(keys["_key"], sorted(keys["_key"], reverse=True), label + " descending")

if __name__ == "__main__":
    run_tests(budget_s=120, teardown=teardown)
