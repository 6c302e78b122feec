"""The shard request cache (issue #26), as Elasticsearch's: size-0 results
cached per shard and reader, ?request_cache, index.requests.cache.enable,
no caching of date math on now or of profiled requests, a refresh that
changes a shard makes its entries unreachable, _cache/clear?request, the
figures in _stats/request_cache and _nodes/stats, and the byte bound
(-E indices.requests.cache.size) with LRU evictions. On a solo node and a
3-node static cluster."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node, SoloAndCluster, eq, error_is, run_tests, shoal_bin, test  # noqa: E402

FIX = SoloAndCluster("shoal-request-cache-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown

AGG = {"size": 0, "aggs": {"c": {"terms": {"field": "color"}}}}


def nodes():
    return (("solo", solo()), ("cluster", cluster()["node-2"]))


def figures(n, index):
    st, b = n.req("GET", "/%s/_stats/request_cache" % index)
    eq(st, 200, "stats: %s" % b)
    rc = b["indices"][index]["total"]["request_cache"]
    return rc["hit_count"], rc["miss_count"], rc["memory_size_in_bytes"], rc["evictions"]


def load(n, index, shards=2):
    n.req("DELETE", "/" + index)
    st, b = n.req("PUT", "/" + index, {
        "settings": {"number_of_shards": shards, "number_of_replicas": 0},
        "mappings": {"properties": {"color": {"type": "keyword"}, "d": {"type": "date"}}}})
    eq(st, 200, "create: %s" % b)
    lines = []
    for i in range(20):
        lines += [{"index": {"_index": index, "_id": str(i)}},
                  {"color": ["red", "green", "blue"][i % 3], "d": "2020-01-%02d" % (i + 1)}]
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk")


def search(n, index, body, params=""):
    st, b = n.req("POST", "/%s/_search%s" % (index, params), body)
    eq(st, 200, "search: %s" % b)
    b.pop("took", None)
    return b


@test
def size_zero_results_are_cached_per_shard():
    for label, n in nodes():
        load(n, "rc")
        eq(figures(n, "rc")[:3], (0, 0, 0), label + " nothing cached yet")
        first = search(n, "rc", AGG)
        hits, misses, mem, _ = figures(n, "rc")
        eq((hits, misses), (0, 2), label + " one miss per shard")
        if mem <= 0:
            raise AssertionError(label + " memory_size_in_bytes stays 0")
        again = search(n, "rc", AGG)
        eq(again, first, label + " a hit answers as the miss did")
        eq(figures(n, "rc")[:2], (2, 2), label + " one hit per shard")
        buckets = {x["key"]: x["doc_count"] for x in again["aggregations"]["c"]["buckets"]}
        eq(buckets, {"red": 7, "green": 7, "blue": 6}, label + " the answer")
        # typed_keys changes the shard's bytes: another key
        search(n, "rc", AGG, "?typed_keys=true")
        eq(figures(n, "rc")[:2], (2, 4), label + " typed_keys is another entry")


@test
def what_is_not_cached():
    for label, n in nodes():
        load(n, "rn")
        base = figures(n, "rn")[:2]
        search(n, "rn", AGG, "?request_cache=false")
        search(n, "rn", dict(AGG, size=3))
        search(n, "rn", dict(AGG, profile=True))
        search(n, "rn", {"size": 0, "query": {"range": {"d": {"gte": "now-100y"}}}})
        search(n, "rn", {"size": 0, "query": {"range": {"d": {"lte": "now/d"}}}})
        eq(figures(n, "rn")[:2], base, label + " none of them counted")
        # a string that merely starts with now is no date math
        search(n, "rn", {"size": 0, "query": {"term": {"color": "nowhere"}}})
        eq(figures(n, "rn")[:2], (base[0], base[1] + 2), label + " 'nowhere' is cached")


@test
def a_refresh_that_changes_a_shard_drops_its_entries():
    for label, n in nodes():
        load(n, "rr", shards=1)
        first = search(n, "rr", AGG)
        eq(first["hits"]["total"]["value"], 20, label + " before")
        search(n, "rr", AGG)
        eq(figures(n, "rr")[:2], (1, 1), label + " cached")
        st, _ = n.req("PUT", "/rr/_doc/new?refresh=true", {"color": "red"})
        eq(st, 201, label + " write")
        after = search(n, "rr", AGG)
        eq(after["hits"]["total"]["value"], 21, label + " the new document counts")
        eq(figures(n, "rr")[:2], (1, 2), label + " a miss on the new reader")
        st, _ = n.req("DELETE", "/rr/_doc/new?refresh=true")
        eq(st, 200, label + " delete")
        eq(search(n, "rr", AGG)["hits"]["total"]["value"], 20, label + " after the delete")


@test
def index_setting_and_request_parameter():
    for label, n in nodes():
        n.req("DELETE", "/ro")
        st, b = n.req("PUT", "/ro", {"settings": {"number_of_shards": 1,
                                                  "number_of_replicas": 0,
                                                  "index.requests.cache.enable": False},
                                     "mappings": {"properties": {"color": {"type": "keyword"}}}})
        eq(st, 200, label + " create with the cache off: %s" % b)
        st, b = n.req("GET", "/ro/_settings")
        eq(b["ro"]["settings"]["index"]["requests"]["cache"]["enable"], "false",
           label + " setting shown")
        n.req("PUT", "/ro/_doc/1?refresh=true", {"color": "red"})
        search(n, "ro", AGG)
        eq(figures(n, "ro")[:2], (0, 0), label + " off: not consulted")
        # request_cache=true overrides the index setting, as ES
        search(n, "ro", AGG, "?request_cache=true")
        search(n, "ro", AGG, "?request_cache=true")
        eq(figures(n, "ro")[:2], (1, 1), label + " request_cache=true")
        st, b = n.req("PUT", "/ro/_settings", {"index": {"requests.cache.enable": True}})
        eq(st, 200, label + " dynamic: %s" % b)
        search(n, "ro", AGG)
        eq(figures(n, "ro")[:2], (2, 1), label + " back on")
        error_is(n.req("PUT", "/ro/_settings", {"index.requests.cache.enable": "maybe"}), 400,
                 "illegal_argument_exception")


@test
def clear_and_figures_everywhere():
    for label, n in nodes():
        load(n, "rs")
        search(n, "rs", AGG)
        hits, misses, mem, _ = figures(n, "rs")
        if mem <= 0:
            raise AssertionError(label + " nothing held")
        st, b = n.req("POST", "/rs/_cache/clear?request=true")
        eq(st, 200, label + " clear: %s" % b)
        eq(b["_shards"]["failed"], 0, label + " no shard failed")
        eq(figures(n, "rs")[2], 0, label + " memory after the clear")
        search(n, "rs", AGG)
        eq(figures(n, "rs")[:2], (hits, misses + 2), label + " misses after the clear")
        st, b = n.req("POST", "/_cache/clear")
        eq(st, 200, label + " clear all")
        eq(figures(n, "rs")[2], 0, label + " memory after clearing all")
        # the sections of _stats and their metric filters
        st, b = n.req("GET", "/_stats")
        for sec in ("request_cache", "query_cache", "fielddata", "docs"):
            if sec not in b["_all"]["total"]:
                raise AssertionError("%s _stats lacks %s" % (label, sec))
        st, b = n.req("GET", "/_stats/request_cache")
        eq(sorted(b["_all"]["total"]), ["request_cache"], label + " _stats/request_cache")
        eq(sorted(b["indices"]["rs"]["primaries"]), ["request_cache"], label + " per index")
        st, b = n.req("GET", "/rs/_stats/fielddata,docs")
        eq(sorted(b["_all"]["total"]), ["docs", "fielddata"], label + " two metrics")
        eq(b["_all"]["total"]["fielddata"]["memory_size_in_bytes"], 0, label + " no fielddata")
        error_is(n.req("GET", "/_stats/nonsense"), 400, "illegal_argument_exception",
                 "request [/_stats/nonsense] contains unrecognized metric: [nonsense]")
        st, b = n.req("GET", "/_nodes/stats")
        eq(st, 200, label + " _nodes/stats")
        total_hits = sum(nd["indices"]["request_cache"]["hit_count"]
                         for nd in b["nodes"].values())
        if total_hits < 1:
            raise AssertionError(label + " _nodes/stats shows no hits: %s" % total_hits)


@test
def bounded_in_bytes_with_lru_evictions():
    with Node(args=["-E", "indices.requests.cache.size=4kb"]) as n:
        load(n, "rb", shards=1)
        for i in range(40):
            search(n, "rb", {"size": 0, "aggs": {"c": {"terms": {"field": "color",
                                                                 "size": i + 1}}}})
        hits, misses, mem, evictions = figures(n, "rb")
        eq(misses, 40, "every search a new key")
        if mem > 4096 or mem <= 0:
            raise AssertionError("memory %d outside (0, 4096]" % mem)
        if evictions < 1:
            raise AssertionError("no evictions")
        # the newest is still there, the oldest went
        search(n, "rb", {"size": 0, "aggs": {"c": {"terms": {"field": "color", "size": 40}}}})
        search(n, "rb", {"size": 0, "aggs": {"c": {"terms": {"field": "color", "size": 1}}}})
        eq(figures(n, "rb")[:2], (1, 41), "newest hit, oldest missed")
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([shoal_bin(), "--solo", "--data", d, "--http", "127.0.0.1:1",
                            "-E", "indices.requests.cache.size=lots"],
                           capture_output=True, timeout=20)
        eq(p.returncode, 2, "a bad size is refused at start: %s" % p.stderr)


if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
