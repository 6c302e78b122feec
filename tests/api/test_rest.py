"""Every REST endpoint of a solo node: happy and error paths with exact
status and error type, response shapes field by field."""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node, error_is, eq, gz, run_tests, test  # noqa: E402

N = None  # the shared node


def node():
    global N
    if N is None:
        N = Node()
    return N


def fresh(name, body=None):
    n = node()
    n.req("DELETE", "/" + name)
    st, b = n.req("PUT", "/" + name, body)
    assert st == 200, (st, b)
    return n


def write_shape(b, index, id_, version, result):
    eq(b["_index"], index, "_index")
    eq(b["_type"], "_doc", "_type")
    eq(b["_id"], id_, "_id")
    eq(b["_version"], version, "_version")
    eq(b["result"], result, "result")
    eq(sorted(b["_shards"]), ["failed", "successful", "total"], "_shards keys")
    eq(b["_shards"]["successful"], 1, "_shards.successful")
    eq(b["_shards"]["failed"], 0, "_shards.failed")
    assert isinstance(b["_seq_no"], int) and b["_seq_no"] >= 0, b
    eq(b["_primary_term"], 1, "_primary_term")


# ---------------- cluster ----------------

@test
def root_info():
    st, b = node().req("GET", "/")
    eq(st, 200)
    eq(b["name"], "test-node", "name")
    eq(b["cluster_name"], "shoal", "cluster_name")
    assert re.fullmatch(r"[A-Za-z0-9_-]{20,}", b["cluster_uuid"]), b["cluster_uuid"]
    v = b["version"]
    eq(v["number"], "7.10.2", "version.number")
    eq(v["build_flavor"], "default", "build_flavor")
    eq(v["build_type"], "tar", "build_type")
    assert v["build_hash"] and v["build_date"], v
    eq(v["build_snapshot"], False, "build_snapshot")
    eq(v["lucene_version"], "8.7.0", "lucene_version")
    eq(v["minimum_wire_compatibility_version"], "6.8.0", "min wire")
    eq(v["minimum_index_compatibility_version"], "6.0.0-beta1", "min index")
    eq(b["tagline"], "You Know, for Search", "tagline")
    st, h, data = node().raw("HEAD", "/")
    eq(st, 200)
    eq(data, b"", "HEAD body")


@test
def pretty_and_filter_path():
    n = node()
    st, h, data = n.raw("GET", "/?pretty")
    text = data.decode()
    assert text.endswith("}\n") and '"tagline" : "You Know, for Search"' in text, text
    st, b = n.req("GET", "/?filter_path=version.number,tagline")
    eq(b, {"version": {"number": "7.10.2"}, "tagline": "You Know, for Search"})
    st, b = n.req("GET", "/?filter_path=-version")
    assert "version" not in b and "tagline" in b, b
    st, b = n.req("GET", "/?filter_path=**.number")
    eq(b, {"version": {"number": "7.10.2"}})
    st, b = n.req("GET", "/?format=json&error_trace=true")
    eq(st, 200)
    error_is(n.req("GET", "/?format=yaml"), 400, "illegal_argument_exception")


@test
def unknown_params_routes_methods():
    n = fresh("up1")
    error_is(n.req("GET", "/up1/_search?foo=1"), 400, "illegal_argument_exception",
             "request [/up1/_search] contains unrecognized parameter: [foo]")
    error_is(n.req("GET", "/up1/_search?foo=1&bar=2"), 400, "illegal_argument_exception",
             "contains unrecognized parameters: [foo], [bar]")
    error_is(n.req("GET", "/up1/_search?" + "&".join("pretty=%d" % i for i in range(40))), 400,
             "illegal_argument_exception", "more than")
    st, b = n.req("GET", "/a/b/c/d/e")
    eq(st, 400)
    assert "no handler found for uri [/a/b/c/d/e] and method [GET]" in b["error"], b
    st, b = n.req("GET", "/up1/_doc")
    eq(st, 405)
    assert "Incorrect HTTP method for uri [/up1/_doc] and method [GET], allowed: [POST]" in b["error"], b
    eq(b["status"], 405)


@test
def cluster_health():
    n = node()
    for name in [i["index"] for i in n.req("GET", "/_cat/indices?format=json")[1]]:
        n.req("DELETE", "/" + name)
    st, b = n.req("GET", "/_cluster/health")
    eq(st, 200)
    keys = ["cluster_name", "status", "timed_out", "number_of_nodes", "number_of_data_nodes",
            "active_primary_shards", "active_shards", "relocating_shards", "initializing_shards",
            "unassigned_shards", "delayed_unassigned_shards", "number_of_pending_tasks",
            "number_of_in_flight_fetch", "task_max_waiting_in_queue_millis",
            "active_shards_percent_as_number"]
    eq(list(b), keys, "health keys")
    eq(b["status"], "green")
    eq(b["number_of_nodes"], 1)
    fresh("h1", {"settings": {"number_of_shards": 2}})
    fresh("h0", {"settings": {"number_of_shards": 1, "number_of_replicas": 0}})
    st, b = n.req("GET", "/_cluster/health")
    eq(b["status"], "yellow", "replicas cannot be assigned on one node")
    eq(b["active_primary_shards"], 3)
    eq(b["unassigned_shards"], 2)
    eq(b["active_shards_percent_as_number"], 60.0)
    st, b = n.req("GET", "/_cluster/health/h0")
    eq((st, b["status"]), (200, "green"))
    st, b = n.req("GET", "/_cluster/health/h1?level=indices")
    eq(b["indices"]["h1"]["status"], "yellow")
    eq(b["indices"]["h1"]["number_of_shards"], 2)
    st, b = n.req("GET", "/_cluster/health?wait_for_status=yellow&timeout=1s")
    eq((st, b["timed_out"]), (200, False))
    st, b = n.req("GET", "/_cluster/health?wait_for_status=green&timeout=1s")
    eq((st, b["timed_out"], b["status"]), (408, True, "yellow"))
    st, b = n.req("GET", "/_cluster/health/missing?timeout=1s")
    eq((st, b["status"]), (408, "red"))
    n.req("DELETE", "/h1")
    n.req("DELETE", "/h0")


@test
def cat_endpoints():
    n = fresh("cat1", {"settings": {"number_of_shards": 2, "number_of_replicas": 1}})
    n.bulk([{"index": {"_id": str(i)}} if j == 0 else {"v": i} for i in range(5) for j in range(2)],
           "/cat1/_bulk", "?refresh=true")
    st, text = n.req("GET", "/_cat/indices/cat1?v")
    eq(st, 200)
    lines = text.splitlines()
    eq(lines[0].split(), ["health", "status", "index", "uuid", "pri", "rep", "docs.count",
                          "docs.deleted", "store.size", "pri.store.size"], "header")
    row = lines[1].split()
    eq(row[:3] + row[4:7], ["yellow", "open", "cat1", "2", "1", "5"], "row")
    st, text = n.req("GET", "/_cat/indices/cat1?h=index,docs.count")
    eq(text.split(), ["cat1", "5"])
    st, b = n.req("GET", "/_cat/indices/cat1?format=json")
    eq(b[0]["index"], "cat1")
    eq(b[0]["docs.count"], "5")
    eq(b[0]["pri"], "2")
    st, text = n.req("GET", "/_cat/shards/cat1")
    rows = [l.split() for l in text.splitlines()]
    eq(len(rows), 4, "2 primaries + 2 unassigned replicas")
    eq(sorted(r[2] + r[3] for r in rows), ["pSTARTED", "pSTARTED", "rUNASSIGNED", "rUNASSIGNED"])
    st, text = n.req("GET", "/_cat/count/cat1?v")
    eq(text.splitlines()[0].split(), ["epoch", "timestamp", "count"])
    eq(text.splitlines()[1].split()[2], "5")
    st, b = n.req("GET", "/_cat/nodes?format=json")
    eq(b[0]["name"], "test-node")
    eq(b[0]["master"], "*")
    st, text = n.req("GET", "/_cat/health?h=status,cluster")
    eq(text.split(), ["yellow", "shoal"])
    error_is(n.req("GET", "/_cat/indices?h=nope"), 400, "illegal_argument_exception")
    error_is(n.req("GET", "/_cat/indices/nope"), 404, "index_not_found_exception")
    st, text = n.req("GET", "/_cat/indices?s=index:desc&h=index")
    names = text.split()
    eq(names, sorted(names, reverse=True), "sorted desc")


@test
def nodes_stats_and_prometheus():
    n = fresh("st1")
    n.req("PUT", "/st1/_doc/1?refresh=true", {"a": 1})
    n.req("GET", "/st1/_search")
    st, b = n.req("GET", "/_nodes/stats")
    eq(st, 200)
    eq(b["_nodes"], {"total": 1, "successful": 1, "failed": 0})
    (nid, nd), = b["nodes"].items()
    eq(nd["name"], "test-node")
    ind = nd["indices"]
    assert ind["docs"]["count"] >= 1, ind
    assert ind["store"]["size_in_bytes"] > 0, ind
    assert ind["indexing"]["index_total"] >= 1, ind
    assert ind["search"]["query_total"] >= 1, ind
    mem = nd["shoal"]["memory"]
    for m in ["storage", "search", "node", "coordinator"]:
        assert any(k.startswith(m) for k in mem), mem
    assert mem["total_in_bytes"] > 0
    st, b = n.req("GET", "/st1/_stats")
    eq(st, 200)
    eq(b["indices"]["st1"]["primaries"]["docs"]["count"], 1)
    assert "_all" in b and "_shards" in b
    st, h, data = n.raw("GET", "/_prometheus/metrics")
    eq(st, 200)
    assert h["content-type"].startswith("text/plain"), h
    text = data.decode()
    assert re.search(r'^shoal_index_docs\{index="st1"\} 1$', text, re.M), text[:500]
    assert "# TYPE shoal_memory_bytes gauge" in text
    assert re.search(r"^shoal_http_requests_total \d+$", text, re.M)


# ---------------- indices ----------------

@test
def index_create_get_settings():
    n = node()
    n.req("DELETE", "/ix1")
    st, b = n.req("PUT", "/ix1", {"settings": {"index": {"number_of_shards": 3},
                                               "number_of_replicas": 0,
                                               "refresh_interval": "2s"},
                                  "mappings": {"properties": {"title": {"type": "text"},
                                                              "n": {"type": "integer"}}}})
    eq((st, b), (200, {"acknowledged": True, "shards_acknowledged": True, "index": "ix1"}))
    st, b = n.req("GET", "/ix1/_settings")
    s = b["ix1"]["settings"]["index"]
    eq(s["number_of_shards"], "3")
    eq(s["number_of_replicas"], "0")
    eq(s["refresh_interval"], "2s")
    eq(s["provided_name"], "ix1")
    eq(s["version"], {"created": "7100299"})
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", s["uuid"]), s
    assert s["creation_date"].isdigit()
    st, b = n.req("GET", "/ix1/_settings?flat_settings=true")
    eq(b["ix1"]["settings"]["index.number_of_shards"], "3")
    st, b = n.req("GET", "/ix1")
    eq(sorted(b["ix1"]), ["aliases", "mappings", "settings"])
    eq(b["ix1"]["mappings"]["properties"]["n"], {"type": "integer"})
    eq(n.req("GET", "/ix1/_alias"), (200, {"ix1": {"aliases": {}}}))
    st, h, data = n.raw("HEAD", "/ix1")
    eq((st, data), (200, b""))
    st, h, data = n.raw("HEAD", "/nope")
    eq((st, data), (404, b""))
    error_is(n.req("GET", "/nope"), 404, "index_not_found_exception", "no such index [nope]")
    st, b = n.req("GET", "/nope")
    eq(b["error"]["index"], "nope")
    eq(b["error"]["resource.type"], "index_or_alias")
    # update a dynamic setting; a static one is refused
    st, b = n.req("PUT", "/ix1/_settings", {"index": {"refresh_interval": "-1"}})
    eq((st, b), (200, {"acknowledged": True}))
    eq(n.req("GET", "/ix1/_settings")[1]["ix1"]["settings"]["index"]["refresh_interval"], "-1")
    error_is(n.req("PUT", "/ix1/_settings", {"index": {"number_of_shards": 2}}), 400,
             "illegal_argument_exception")


@test
def index_create_errors():
    n = node()
    for bad, part in [("BAD", "must be lowercase"), ("_x", "must not start with"),
                      ("a*b", "must not contain"), ("a#b", "must not contain"),
                      ("a,b", "must not contain"), ("..", "must not be")]:
        error_is(n.req("PUT", "/" + bad), 400, "invalid_index_name_exception", part)
    st, b = n.req("PUT", "/BAD")
    eq(b["error"]["index"], "BAD")
    fresh("dup1")
    error_is(n.req("PUT", "/dup1"), 400, "resource_already_exists_exception", "already exists")
    error_is(n.req("PUT", "/e1", {"settings": {"number_of_shards": 0}}), 400,
             "illegal_argument_exception")
    error_is(n.req("PUT", "/e1", {"settings": {"index.foo": 1}}), 400,
             "illegal_argument_exception", "unknown setting [index.foo]")
    error_is(n.req("PUT", "/e1", {"settings": {"refresh_interval": "soon"}}), 400,
             "illegal_argument_exception")
    error_is(n.req("PUT", "/e1", {"bogus": {}}), 400, "parsing_exception")
    error_is(n.req("PUT", "/e1", "{not json"), 400, "parse_exception")
    error_is(n.req("PUT", "/e1", {"mappings": {"properties": {"x": {"type": "nope"}}}}), 400,
             "mapper_parsing_exception")
    eq(n.raw("HEAD", "/e1")[0], 404, "nothing half-created")


@test
def index_delete():
    n = node()
    for i in ["del-a", "del-b", "del-c", "keep"]:
        fresh(i)
    st, b = n.req("DELETE", "/del-a")
    eq((st, b), (200, {"acknowledged": True}))
    eq(n.raw("HEAD", "/del-a")[0], 404)
    error_is(n.req("DELETE", "/del-a"), 404, "index_not_found_exception")
    st, b = n.req("DELETE", "/del-*")
    eq(st, 200)
    eq([n.raw("HEAD", "/" + i)[0] for i in ["del-b", "del-c", "keep"]], [404, 404, 200])
    error_is(n.req("DELETE", "/_all"), 400, "illegal_argument_exception")
    error_is(n.req("DELETE", "/*"), 400, "illegal_argument_exception")
    fresh("del-x")
    fresh("del-y")
    st, b = n.req("DELETE", "/del-x,del-y")
    eq(st, 200)
    eq(n.raw("HEAD", "/del-x")[0], 404)
    eq(n.raw("HEAD", "/keep")[0], 200)
    st, b = n.req("DELETE", "/nope1,keep?ignore_unavailable=true")
    eq(st, 200)


@test
def destructive_requires_name_false():
    with Node(args=["-E", "action.destructive_requires_name=false"]) as m:
        m.req("PUT", "/a1")
        m.req("PUT", "/a2")
        st, b = m.req("DELETE", "/_all")
        eq((st, b), (200, {"acknowledged": True}))
        eq(m.req("GET", "/_cat/indices?format=json")[1], [])


@test
def cluster_settings_destructive():
    n = node()
    eq(n.req("GET", "/_cluster/settings"), (200, {"persistent": {}, "transient": {}}))
    fresh("cs1")
    st, b = n.req("PUT", "/_cluster/settings",
                  {"transient": {"action.destructive_requires_name": False}})
    eq((st, b["acknowledged"]), (200, True))
    eq(b["transient"], {"action": {"destructive_requires_name": "false"}})
    try:
        st, b = n.req("DELETE", "/cs*")
        eq(st, 200)
        eq(n.raw("HEAD", "/cs1")[0], 404)
    finally:
        st, b = n.req("PUT", "/_cluster/settings",
                      {"transient": {"action.destructive_requires_name": None}})
        eq(st, 200)
    error_is(n.req("DELETE", "/_all"), 400, "illegal_argument_exception")
    error_is(n.req("PUT", "/_cluster/settings", {"persistent": {"cluster.x": 1}}), 400,
             "illegal_argument_exception")


@test
def headers_and_cat_help():
    n = node()
    st, h, data = n.raw("GET", "/")
    eq(h.get("x-elastic-product"), "Elasticsearch")
    eq(h.get("content-type"), "application/json; charset=UTF-8")
    st, text = n.req("GET", "/_cat")
    assert text.startswith("=^.^=") and "/_cat/indices" in text, text


@test
def mappings_put_get_dynamic():
    n = fresh("map1", {"mappings": {"properties": {"title": {"type": "text"}}}})
    st, b = n.req("PUT", "/map1/_mapping", {"properties": {"tag": {"type": "keyword"}}})
    eq((st, b), (200, {"acknowledged": True}))
    st, b = n.req("GET", "/map1/_mapping")
    props = b["map1"]["mappings"]["properties"]
    eq(props["tag"], {"type": "keyword"})
    eq(props["title"], {"type": "text"})
    error_is(n.req("PUT", "/map1/_mapping", {"properties": {"title": {"type": "long"}}}), 400,
             "illegal_argument_exception")
    error_is(n.req("PUT", "/map1/_mapping"), 400, "action_request_validation_exception")
    error_is(n.req("PUT", "/nope/_mapping", {"properties": {}}), 404, "index_not_found_exception")
    # dynamic mapping as ES does it
    st, b = n.req("PUT", "/map1/_doc/1", {"s": "hello", "i": 5, "f": 1.5, "b": True,
                                          "d": "2024-01-31T10:00:00Z", "o": {"x": "y"}})
    eq(st, 201)
    props = n.req("GET", "/map1/_mapping")[1]["map1"]["mappings"]["properties"]
    eq(props["s"], {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}})
    eq(props["i"], {"type": "long"})
    eq(props["f"], {"type": "float"})
    eq(props["b"], {"type": "boolean"})
    eq(props["d"]["type"], "date")
    eq(props["o"]["properties"]["x"]["type"], "text")
    # a value of the wrong type for a mapped field
    error_is(n.req("PUT", "/map1/_doc/2", {"i": "abc"}), 400, "mapper_parsing_exception")
    # strict
    fresh("map2", {"mappings": {"dynamic": "strict", "properties": {"a": {"type": "long"}}}})
    error_is(n.req("PUT", "/map2/_doc/1", {"b": 1}), 400, "strict_dynamic_mapping_exception")
    eq(n.req("PUT", "/map2/_doc/1", {"a": 1})[0], 201)
    # dynamic false: stored but not mapped
    fresh("map3", {"mappings": {"dynamic": False}})
    eq(n.req("PUT", "/map3/_doc/1?refresh=true", {"zz": "x"})[0], 201)
    eq(n.req("GET", "/map3/_doc/1")[1]["_source"], {"zz": "x"})
    assert "zz" not in json.dumps(n.req("GET", "/map3/_mapping")[1])


@test
def refresh_flush_forcemerge():
    n = fresh("rf1", {"settings": {"number_of_shards": 2, "number_of_replicas": 0}})
    for path in ["/rf1/_refresh", "/rf1/_flush", "/rf1/_forcemerge?max_num_segments=1"]:
        st, b = n.req("POST", path)
        eq(st, 200, path)
        eq(b["_shards"], {"total": 2, "successful": 2, "failed": 0}, path)
    eq(n.req("POST", "/_refresh")[0], 200)
    error_is(n.req("POST", "/rf1/_forcemerge?max_num_segments=x"), 400,
             "illegal_argument_exception")
    error_is(n.req("POST", "/nope/_refresh"), 404, "index_not_found_exception")


@test
def refresh_interval_behaviour():
    n = fresh("ri1", {"settings": {"refresh_interval": "200ms"}})
    n.req("PUT", "/ri1/_doc/1", {"a": 1})
    deadline = time.time() + 5
    while time.time() < deadline:
        if n.req("GET", "/ri1/_count")[1]["count"] == 1:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("scheduled refresh never made the doc visible")
    fresh("ri2", {"settings": {"refresh_interval": "-1"}})
    n.req("PUT", "/ri2/_doc/1", {"a": 1})
    time.sleep(1.3)
    eq(n.req("GET", "/ri2/_count")[1]["count"], 0, "refresh disabled")
    eq(n.req("GET", "/ri2/_doc/1")[1]["found"], True, "realtime get")
    n.refresh("ri2")
    eq(n.req("GET", "/ri2/_count")[1]["count"], 1)


# ---------------- documents ----------------

@test
def doc_index_get_delete():
    n = fresh("d1", {"settings": {"number_of_shards": 3}})
    st, b = n.req("PUT", "/d1/_doc/1", {"title": "one", "n": 1})
    eq(st, 201)
    write_shape(b, "d1", "1", 1, "created")
    eq(b["_shards"]["total"], 2, "1 + replicas")
    st, b = n.req("POST", "/d1/_doc/1", {"title": "uno", "n": 1})
    eq(st, 200)
    write_shape(b, "d1", "1", 2, "updated")
    st, b = n.req("GET", "/d1/_doc/1")
    eq(st, 200)
    eq(list(b), ["_index", "_type", "_id", "_version", "_seq_no", "_primary_term", "found",
                 "_source"], "GET keys")
    eq((b["_index"], b["_type"], b["_id"], b["_version"], b["found"]), ("d1", "_doc", "1", 2, True))
    eq(b["_source"], {"title": "uno", "n": 1})
    st, b = n.req("GET", "/d1/_doc/2")
    eq((st, b), (404, {"_index": "d1", "_type": "_doc", "_id": "2", "found": False}))
    eq(n.raw("HEAD", "/d1/_doc/1")[0], 200)
    eq(n.raw("HEAD", "/d1/_doc/2")[0], 404)
    error_is(n.req("GET", "/nope/_doc/1"), 404, "index_not_found_exception")
    st, b = n.req("GET", "/d1/_source/1")
    eq((st, b), (200, {"title": "uno", "n": 1}))
    error_is(n.req("GET", "/d1/_source/2"), 404, "resource_not_found_exception")
    st, b = n.req("DELETE", "/d1/_doc/1")
    eq(st, 200)
    write_shape(b, "d1", "1", 3, "deleted")
    st, b = n.req("DELETE", "/d1/_doc/1")
    eq(st, 404)
    eq(b["result"], "not_found")
    eq(n.req("GET", "/d1/_doc/1")[0], 404)
    error_is(n.req("DELETE", "/nope/_doc/1"), 404, "index_not_found_exception")


@test
def doc_ids_with_reserved_characters():
    from urllib.parse import quote
    n = fresh("esc1")
    for doc_id in ["a/b", "a b", "x+y", "q?&=#", "\u2713 unicode", "100%"]:
        path = "/esc1/_doc/" + quote(doc_id, safe="")
        st, b = n.req("PUT", path, {"v": doc_id})
        eq((st, b["_id"]), (201, doc_id), doc_id)
        st, b = n.req("GET", path)
        eq((b["_id"], b["_source"]), (doc_id, {"v": doc_id}), doc_id)
    n.refresh("esc1")
    st, b = n.req("GET", "/esc1/_search?q=" + quote("v:x+y") + "&filter_path=hits.hits._id")
    eq(st, 200)
    st, b = n.req("GET", "/esc1/_search?size=0&q=_id:a+OR+_id:b")   # '+' is a space
    eq(st, 200)


@test
def doc_source_filtering():
    n = fresh("sf1")
    n.req("PUT", "/sf1/_doc/1", {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]})
    eq(n.req("GET", "/sf1/_doc/1?_source=false")[1].get("_source"), None)
    eq(n.req("GET", "/sf1/_doc/1?_source=a,b.c")[1]["_source"], {"a": 1, "b": {"c": 2}})
    eq(n.req("GET", "/sf1/_doc/1?_source_includes=b.*")[1]["_source"], {"b": {"c": 2, "d": 3}})
    eq(n.req("GET", "/sf1/_doc/1?_source_excludes=b")[1]["_source"], {"a": 1, "e": [1, 2]})
    eq(n.req("GET", "/sf1/_source/1?_source_includes=a")[1], {"a": 1})


@test
def doc_autogen_create_optype():
    n = fresh("ag1")
    st, b = n.req("POST", "/ag1/_doc", {"x": 1})
    eq(st, 201)
    assert re.fullmatch(r"[A-Za-z0-9_-]{20}", b["_id"]), b["_id"]
    write_shape(b, "ag1", b["_id"], 1, "created")
    ids = {n.req("POST", "/ag1/_doc", {"x": i})[1]["_id"] for i in range(20)}
    eq(len(ids), 20, "ids unique")
    st, b = n.req("PUT", "/ag1/_create/c1", {"x": 1})
    eq(st, 201)
    error_is(n.req("PUT", "/ag1/_create/c1", {"x": 2}), 409, "version_conflict_engine_exception",
             "[c1]: version conflict, document already exists (current version [1])")
    error_is(n.req("PUT", "/ag1/_doc/c1?op_type=create", {"x": 2}), 409,
             "version_conflict_engine_exception")
    error_is(n.req("PUT", "/ag1/_doc/c1?op_type=bogus", {"x": 2}), 400,
             "illegal_argument_exception")
    eq(n.req("GET", "/ag1/_doc/c1")[1]["_source"], {"x": 1})
    # auto-create an index on first write
    n.req("DELETE", "/auto1")
    st, b = n.req("PUT", "/auto1/_doc/1", {"x": 1})
    eq(st, 201)
    eq(n.req("GET", "/auto1/_settings")[1]["auto1"]["settings"]["index"]["number_of_shards"], "1")
    error_is(n.req("PUT", "/Auto/_doc/1", {"x": 1}), 400, "invalid_index_name_exception")


@test
def doc_concurrency_control():
    n = fresh("cc1")
    b = n.req("PUT", "/cc1/_doc/1", {"v": 1})[1]
    seq, term = b["_seq_no"], b["_primary_term"]
    st, b2 = n.req("PUT", "/cc1/_doc/1?if_seq_no=%d&if_primary_term=%d" % (seq, term), {"v": 2})
    eq(st, 200)
    error_is(n.req("PUT", "/cc1/_doc/1?if_seq_no=%d&if_primary_term=%d" % (seq, term), {"v": 3}),
             409, "version_conflict_engine_exception")
    error_is(n.req("PUT", "/cc1/_doc/1?if_seq_no=%d" % seq, {"v": 3}), 400,
             "action_request_validation_exception")
    error_is(n.req("DELETE", "/cc1/_doc/1?if_seq_no=999&if_primary_term=1"), 409,
             "version_conflict_engine_exception")
    # external versions
    st, b = n.req("PUT", "/cc1/_doc/e?version=10&version_type=external", {"v": 1})
    eq((st, b["_version"]), (201, 10))
    error_is(n.req("PUT", "/cc1/_doc/e?version=5&version_type=external", {"v": 2}), 409,
             "version_conflict_engine_exception")
    st, b = n.req("PUT", "/cc1/_doc/e?version=11&version_type=external", {"v": 3})
    eq((st, b["_version"]), (200, 11))
    error_is(n.req("PUT", "/cc1/_doc/e?version=12", {"v": 3}), 400,
             "action_request_validation_exception", "internal versioning can not be used")
    error_is(n.req("PUT", "/cc1/_doc/e?version=x&version_type=external", {"v": 3}), 400,
             "illegal_argument_exception")


@test
def doc_body_errors_and_refresh_param():
    n = fresh("be1")
    error_is(n.req("PUT", "/be1/_doc/1", "{bad json"), 400, "mapper_parsing_exception")
    error_is(n.req("PUT", "/be1/_doc/1", "[1,2]"), 400, "mapper_parsing_exception")
    error_is(n.req("PUT", "/be1/_doc/1"), 400, "action_request_validation_exception")
    error_is(n.req("PUT", "/be1/_doc/1?refresh=soon", {"a": 1}), 400, "illegal_argument_exception")
    eq(n.req("GET", "/be1/_doc/1")[0], 404, "nothing written")
    st, b = n.req("PUT", "/be1/_doc/1?refresh=true", {"a": 1})
    eq(b.get("forced_refresh"), True)
    eq(n.req("GET", "/be1/_count")[1]["count"], 1)
    st, b = n.req("PUT", "/be1/_doc/2?refresh=wait_for", {"a": 1})
    eq(st, 201)
    eq(n.req("GET", "/be1/_count")[1]["count"], 2)
    error_is(n.req("PUT", "/be1/_doc/" + "x" * 513, {"a": 1}), 400,
             "action_request_validation_exception")


@test
def doc_routing():
    n = fresh("rt1", {"settings": {"number_of_shards": 4}})
    for i in range(8):
        eq(n.req("PUT", "/rt1/_doc/%d?routing=user1" % i, {"i": i})[0], 201)
    n.refresh("rt1")
    st, text = n.req("GET", "/_cat/shards/rt1?h=docs&format=json")
    counts = sorted(int(r["docs"] or 0) for r in text)
    eq(counts[-1], 8, "all routed to one shard")
    eq(n.req("GET", "/rt1/_doc/3?routing=user1")[1]["found"], True)


@test
def update_api():
    n = fresh("u1")
    n.req("PUT", "/u1/_doc/1", {"a": 1, "o": {"x": 1, "y": 2}})
    st, b = n.req("POST", "/u1/_update/1", {"doc": {"b": 2, "o": {"y": 3}}})
    eq(st, 200)
    write_shape(b, "u1", "1", 2, "updated")
    eq(n.req("GET", "/u1/_doc/1")[1]["_source"], {"a": 1, "o": {"x": 1, "y": 3}, "b": 2})
    st, b = n.req("POST", "/u1/_update/1", {"doc": {"b": 2}})
    eq((st, b["result"], b["_version"]), (200, "noop", 2))
    eq(b["_shards"], {"total": 0, "successful": 0, "failed": 0})
    st, b = n.req("POST", "/u1/_update/1", {"doc": {"b": 2}, "detect_noop": False})
    eq((b["result"], b["_version"]), ("updated", 3))
    error_is(n.req("POST", "/u1/_update/2", {"doc": {"a": 1}}), 404, "document_missing_exception",
             "[_doc][2]: document missing")
    st, b = n.req("POST", "/u1/_update/2", {"doc": {"a": 1}, "doc_as_upsert": True})
    eq((st, b["result"]), (201, "created"))
    st, b = n.req("POST", "/u1/_update/3", {"doc": {"a": 1}, "upsert": {"a": 0, "u": True}})
    eq((st, b["result"]), (201, "created"))
    eq(n.req("GET", "/u1/_doc/3")[1]["_source"], {"a": 0, "u": True})
    st, b = n.req("POST", "/u1/_update/3", {"doc": {"a": 1}, "upsert": {"a": 0}})
    eq(n.req("GET", "/u1/_doc/3")[1]["_source"], {"a": 1, "u": True})
    error_is(n.req("POST", "/u1/_update/1", {}), 400, "action_request_validation_exception")
    # painless scripts run (test_painless.py); other languages are refused
    error_is(n.req("POST", "/u1/_update/1",
                   {"script": {"source": "ctx._source.a++", "lang": "expression"}}), 400,
             "illegal_argument_exception")
    error_is(n.req("POST", "/u1/_update/1", {"doc": {}, "bogus": 1}), 400,
             "x_content_parse_exception")
    seq = n.req("GET", "/u1/_doc/1")[1]["_seq_no"]
    error_is(n.req("POST", "/u1/_update/1?if_seq_no=%d&if_primary_term=1" % (seq + 100),
                   {"doc": {"z": 1}}), 409, "version_conflict_engine_exception")
    st, b = n.req("POST", "/u1/_update/1?if_seq_no=%d&if_primary_term=1&retry_on_conflict=2" % seq,
                  {"doc": {"z": 1}})
    eq(st, 200)
    error_is(n.req("POST", "/u1/_update/1?retry_on_conflict=x", {"doc": {"z": 1}}), 400,
             "illegal_argument_exception")


@test
def update_concurrent_counters():
    """Concurrent partial updates of one doc with retry_on_conflict: none lost."""
    import threading
    n = fresh("u2")
    n.req("PUT", "/u2/_doc/1", {"c": 0})
    errors = []

    def worker(k):
        m = Node(data=n.data, start=False)
        m.port = n.port
        for i in range(10):
            st, b = m.req("POST", "/u2/_update/1?retry_on_conflict=50",
                          {"doc": {"w%d_%d" % (k, i): True}})
            if st != 200:
                errors.append((st, b))
        m.close_conn()
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    eq(errors, [], "update errors")
    src = n.req("GET", "/u2/_doc/1")[1]
    eq(len(src["_source"]), 41, "every field added by some update")
    eq(src["_version"], 41)


@test
def mget_api():
    n = fresh("mg1")
    n.req("PUT", "/mg1/_doc/1", {"a": 1, "b": 2})
    n.req("PUT", "/mg1/_doc/2", {"a": 3})
    st, b = n.req("POST", "/_mget", {"docs": [{"_index": "mg1", "_id": "1"},
                                              {"_index": "mg1", "_id": "9"},
                                              {"_index": "nope", "_id": "1"},
                                              {"_index": "mg1", "_id": "1", "_source": ["b"]}]})
    eq(st, 200)
    d = b["docs"]
    eq((d[0]["found"], d[0]["_source"]), (True, {"a": 1, "b": 2}))
    eq(d[1], {"_index": "mg1", "_type": "_doc", "_id": "9", "found": False})
    eq(d[2]["error"]["type"], "index_not_found_exception")
    eq(d[3]["_source"], {"b": 2})
    st, b = n.req("GET", "/mg1/_mget", {"ids": ["2", "1"]})
    eq([x["_id"] for x in b["docs"]], ["2", "1"])
    eq(b["docs"][0]["_source"], {"a": 3})
    error_is(n.req("POST", "/_mget", {"ids": ["1"]}), 400, "action_request_validation_exception")
    error_is(n.req("POST", "/_mget", {}), 400, "action_request_validation_exception")


# ---------------- bulk ----------------

@test
def bulk_items_shape():
    n = fresh("bk1")
    st, b = n.bulk([
        {"index": {"_index": "bk1", "_id": "1"}}, {"a": 1},
        {"create": {"_index": "bk1", "_id": "1"}}, {"a": 2},
        {"update": {"_index": "bk1", "_id": "1"}}, {"doc": {"b": 1}},
        {"delete": {"_index": "bk1", "_id": "404"}},
        {"index": {"_index": "bk1"}}, {"a": 5},
        {"index": {"_index": "bk1", "_id": "m"}}, {"a": "not a number"},
        {"update": {"_index": "bk1", "_id": "missing"}}, {"doc": {"b": 1}},
        {"delete": {"_index": "bk1", "_id": "1"}},
    ], params="?refresh=true")
    eq(st, 200)
    eq(list(b), ["took", "errors", "items"])
    eq(b["errors"], True)
    it = b["items"]
    eq([list(x)[0] for x in it], ["index", "create", "update", "delete", "index", "index",
                                   "update", "delete"])
    i0 = it[0]["index"]
    eq(list(i0), ["_index", "_type", "_id", "_version", "result", "forced_refresh", "_shards",
                  "_seq_no", "_primary_term", "status"])
    eq((i0["status"], i0["result"], i0["_version"], i0["forced_refresh"]),
       (201, "created", 1, True))
    c = it[1]["create"]
    eq(c["status"], 409)
    eq(c["error"]["type"], "version_conflict_engine_exception")
    eq((c["error"]["index"], c["error"]["shard"]), ("bk1", "0"))
    eq((it[2]["update"]["status"], it[2]["update"]["result"]), (200, "updated"))
    eq((it[3]["delete"]["status"], it[3]["delete"]["result"]), (404, "not_found"))
    assert re.fullmatch(r"[A-Za-z0-9_-]{20}", it[4]["index"]["_id"])
    eq(it[5]["index"]["status"], 400)
    eq(it[5]["index"]["error"]["type"], "mapper_parsing_exception")
    eq(it[6]["update"]["status"], 404)
    eq(it[6]["update"]["error"]["type"], "document_missing_exception")
    eq((it[7]["delete"]["status"], it[7]["delete"]["result"]), (200, "deleted"))
    eq(n.req("GET", "/bk1/_count")[1]["count"], 1)


@test
def bulk_request_errors_apply_nothing():
    n = fresh("bk2")
    body = '{"index":{"_index":"bk2","_id":"1"}}\n{"a":1}\n{"bogus":{"_index":"bk2"}}\n{}\n'
    error_is(n.req("POST", "/_bulk", body), 400, "illegal_argument_exception",
             "Malformed action/metadata line [3]")
    eq(n.req("GET", "/bk2/_doc/1")[0], 404, "nothing applied")
    body = '{"index":{"_index":"bk2","_id":"1"}}\n{"a":1}\n{not json}\n{}\n'
    error_is(n.req("POST", "/_bulk", body), 400, "illegal_argument_exception")
    body = '{"index":{"_index":"bk2","_id":"1","foo":1}}\n{"a":1}\n'
    error_is(n.req("POST", "/_bulk", body), 400, "illegal_argument_exception",
             "unknown parameter [foo]")
    body = '{"index":{"_id":"1"}}\n{"a":1}\n'
    error_is(n.req("POST", "/_bulk", body), 400, "action_request_validation_exception",
             "index is missing")
    body = '{"index":{"_index":"bk2","_id":"1"}}\n'
    error_is(n.req("POST", "/_bulk", body), 400, "illegal_argument_exception")
    error_is(n.req("POST", "/_bulk", ""), 400, "action_request_validation_exception")
    error_is(n.req("POST", "/_bulk?refresh=x", '{"delete":{"_index":"bk2","_id":"1"}}\n'), 400,
             "illegal_argument_exception")
    eq(n.req("GET", "/bk2/_doc/1")[0], 404, "nothing applied")
    # index-level bulk, no trailing newline after a source line
    st, b = n.req("POST", "/bk2/_bulk", '{"index":{"_id":"7"}}\n{"a":7}')
    eq((st, b["errors"]), (200, False))
    eq(n.req("GET", "/bk2/_doc/7")[1]["_source"], {"a": 7})


@test
def bulk_gzip_and_streaming():
    n = fresh("bk3", {"settings": {"number_of_shards": 3, "number_of_replicas": 0}})
    lines = []
    for i in range(30000):
        lines.append('{"index":{"_id":"%d"}}' % i)
        lines.append('{"n":%d,"t":"doc number %d %s"}' % (i, i, "pad" * 80))
    body = ("\n".join(lines) + "\n").encode()
    assert len(body) > 8 << 20, "spans several chunks"
    st, h, data = n.raw("POST", "/bk3/_bulk", gz(body),
                        {"Content-Encoding": "gzip", "Content-Type": "application/x-ndjson"},
                        timeout=120)
    eq(st, 200)
    b = json.loads(data)
    eq(b["errors"], False)
    eq(len(b["items"]), 30000)
    n.refresh("bk3")
    eq(n.req("GET", "/bk3/_count")[1]["count"], 30000)
    st, b = n.req("GET", "/bk3/_doc/29999")
    eq(b["_source"]["n"], 29999)
    st, h, data = n.raw("POST", "/bk3/_doc/x", b"\x1f\x8bnot gzip", {"Content-Encoding": "gzip"})
    eq(st, 400)


@test
def max_content_length_413():
    with Node(args=["-E", "http.max_content_length=2kb"]) as m:
        big = {"a": "x" * 4000}
        st, b = m.req("PUT", "/t/_doc/1", big)
        eq(st, 413)
        eq(b["error"]["type"], "content_too_long_exception")
        body = "".join('{"index":{"_index":"t"}}\n{"a":1}\n' for _ in range(200))
        st, b = m.req("POST", "/_bulk", body)
        eq(st, 413)
        st, b = m.req("PUT", "/t/_doc/1", {"a": 1})
        eq(st, 201, "small bodies still fine")
        # chunked uploads carry no Content-Length: the limit applies as bytes arrive
        import http.client
        for chunks, want in [([b'{"index":{"_index":"t","_id":"c"}}\n', b'{"a":1}\n'], 200),
                             ([b'{"index":{"_index":"t"}}\n{"a":1}\n'] * 100, 413)]:
            c = http.client.HTTPConnection("127.0.0.1", m.port, timeout=30)
            c.request("POST", "/_bulk", body=iter(chunks), encode_chunked=True,
                      headers={"Content-Type": "application/x-ndjson",
                               "Transfer-Encoding": "chunked"})
            resp = c.getresponse()
            data = resp.read()
            c.close()
            eq(resp.status, want, "chunked upload: %s" % data[:200])
        eq(m.req("GET", "/t/_doc/c")[1]["found"], True)


# ---------------- search ----------------

def load_search_index(n, name="s1", shards=2):
    fresh(name, {"settings": {"number_of_shards": shards},
                 "mappings": {"properties": {"title": {"type": "text"},
                                             "tag": {"type": "keyword"},
                                             "n": {"type": "long"}}}})
    docs = []
    for i in range(25):
        docs += [{"index": {"_id": str(i)}},
                 {"title": "quick brown fox %d" % i if i % 2 else "lazy dog %d" % i,
                  "tag": "even" if i % 2 == 0 else "odd", "n": i}]
    st, b = n.bulk(docs, "/%s/_bulk" % name, "?refresh=true")
    assert st == 200 and not b["errors"], b


@test
def search_basics():
    n = node()
    load_search_index(n)
    st, b = n.req("GET", "/s1/_search")
    eq(st, 200)
    eq(list(b)[:4], ["took", "timed_out", "_shards", "hits"])
    eq(b["_shards"], {"total": 2, "successful": 2, "skipped": 0, "failed": 0})
    eq(b["hits"]["total"], {"value": 25, "relation": "eq"})
    eq(len(b["hits"]["hits"]), 10)
    h = b["hits"]["hits"][0]
    for k in ["_index", "_type", "_id", "_score", "_source"]:
        assert k in h, h
    eq(h["_index"], "s1")
    st, b = n.req("GET", "/s1/_search?q=fox&size=100")
    eq(b["hits"]["total"]["value"], 12)
    assert all(int(x["_id"]) % 2 for x in b["hits"]["hits"])
    st, b = n.req("GET", "/s1/_search?q=title:lazy%20AND%20n:[0%20TO%205]")
    eq(sorted(x["_id"] for x in b["hits"]["hits"]), ["0", "2", "4"])
    st, b = n.req("GET", "/s1/_search?q=quick%20lazy&default_operator=AND")
    eq(b["hits"]["total"]["value"], 0)
    st, b = n.req("GET", "/s1/_search?q=even&df=tag")
    eq(b["hits"]["total"]["value"], 13)
    st, b = n.req("GET", "/s1/_search?size=0")
    eq((b["hits"]["total"]["value"], b["hits"]["hits"]), (25, []))
    st, b = n.req("POST", "/s1/_search", {"query": {"range": {"n": {"gte": 20}}},
                                          "sort": [{"n": "desc"}], "size": 3, "from": 1,
                                          "_source": ["n"]})
    eq([x["_id"] for x in b["hits"]["hits"]], ["23", "22", "21"])
    eq(b["hits"]["hits"][0]["_source"], {"n": 23})
    eq(b["hits"]["hits"][0]["sort"], [23])
    st, b = n.req("GET", "/s1/_search?sort=n:asc&size=2&_source=false")
    eq([x["_id"] for x in b["hits"]["hits"]], ["0", "1"])
    assert "_source" not in b["hits"]["hits"][0]
    st, b = n.req("GET", "/s1/_search?rest_total_hits_as_int=true&size=0")
    eq(b["hits"]["total"], 25)
    st, b = n.req("POST", "/s1/_search", {"size": 0, "track_total_hits": False})
    assert "total" not in b["hits"] or b["hits"]["total"] is None, b


@test
def search_pagination_across_shards():
    n = node()
    load_search_index(n, "s2", 3)
    seen = []
    for frm in range(0, 25, 7):
        st, b = n.req("POST", "/s2/_search", {"sort": [{"n": "asc"}], "from": frm, "size": 7})
        seen += [x["_id"] for x in b["hits"]["hits"]]
    eq(seen, [str(i) for i in range(25)])
    for mode in ["serial", "per_shard", "per_node"]:
        st, b = n.req("POST", "/s2/_search?fanout=" + mode, {"sort": [{"n": "asc"}], "size": 25})
        eq([x["_id"] for x in b["hits"]["hits"]], [str(i) for i in range(25)], mode)
    error_is(n.req("POST", "/s2/_search?fanout=sideways"), 400, "illegal_argument_exception")
    st, b = n.req("POST", "/s2/_search", {"sort": [{"n": "asc"}], "size": 5,
                                          "search_after": [9]})
    eq([x["_id"] for x in b["hits"]["hits"]], ["10", "11", "12", "13", "14"])


@test
def search_multi_index_and_errors():
    n = node()
    load_search_index(n, "mi-a", 1)
    load_search_index(n, "mi-b", 2)
    st, b = n.req("GET", "/mi-a,mi-b/_search?size=0")
    eq((b["hits"]["total"]["value"], b["_shards"]["total"]), (50, 3))
    st, b = n.req("GET", "/mi-*/_search?q=n:3&size=10")
    eq(sorted(x["_index"] for x in b["hits"]["hits"]), ["mi-a", "mi-b"])
    st, b = n.req("GET", "/_search?size=0")
    assert b["hits"]["total"]["value"] >= 50
    st, b = n.req("GET", "/_all/_search?size=0")
    assert b["hits"]["total"]["value"] >= 50
    st, b = n.req("GET", "/nomatch-*/_search")
    eq((st, b["hits"]["total"]["value"]), (200, 0))
    error_is(n.req("GET", "/nope/_search"), 404, "index_not_found_exception")
    st, b = n.req("GET", "/nope,mi-a/_search?ignore_unavailable=true&size=0")
    eq(b["hits"]["total"]["value"], 25)
    error_is(n.req("POST", "/mi-a/_search", {"query": {"bogus": {}}}), 400, "parsing_exception",
             "bogus")
    error_is(n.req("POST", "/mi-a/_search", "{bad"), 400, "parse_exception")
    error_is(n.req("POST", "/mi-a/_search", {"from": 9995, "size": 10}), 400,
             "illegal_argument_exception", "Result window is too large")
    error_is(n.req("GET", "/mi-a/_search?size=abc"), 400, "illegal_argument_exception")
    error_is(n.req("GET", "/mi-a/_search?min_score=abc"), 400, "illegal_argument_exception")


@test
def search_aggs():
    n = node()
    load_search_index(n, "ag2", 2)
    st, b = n.req("POST", "/ag2/_search", {"size": 0, "aggs": {
        "tags": {"terms": {"field": "tag"}},
        "mx": {"max": {"field": "n"}},
        "h": {"histogram": {"field": "n", "interval": 10}}}})
    eq(st, 200)
    a = b["aggregations"]
    eq({x["key"]: x["doc_count"] for x in a["tags"]["buckets"]}, {"even": 13, "odd": 12})
    eq(a["mx"]["value"], 24.0)
    eq([(x["key"], x["doc_count"]) for x in a["h"]["buckets"]], [(0.0, 10), (10.0, 10), (20.0, 5)])
    error_is(n.req("POST", "/ag2/_search", {"aggs": {"x": {"nope": {}}}}), 400, "parsing_exception")


@test
def count_api():
    n = node()
    load_search_index(n, "c1", 2)
    st, b = n.req("GET", "/c1/_count")
    eq((st, b), (200, {"count": 25, "_shards": {"total": 2, "successful": 2, "skipped": 0,
                                                "failed": 0}}))
    eq(n.req("GET", "/c1/_count?q=tag:odd")[1]["count"], 12)
    eq(n.req("POST", "/c1/_count", {"query": {"term": {"tag": "even"}}})[1]["count"], 13)
    error_is(n.req("POST", "/c1/_count", {"size": 1}), 400, "parsing_exception")
    error_is(n.req("GET", "/nope/_count"), 404, "index_not_found_exception")


@test
def msearch_api():
    n = node()
    load_search_index(n, "ms1", 1)
    body = ('{"index":"ms1"}\n{"query":{"term":{"tag":"odd"}},"size":0}\n'
            '{}\n{"size":1}\n'
            '{"index":"nope"}\n{}\n'
            '{"index":"ms1"}\n{"query":{"bogus":{}}}\n')
    st, b = n.req("POST", "/ms1/_msearch", body, {"Content-Type": "application/x-ndjson"})
    eq(st, 200)
    r = b["responses"]
    eq(len(r), 4)
    eq((r[0]["status"], r[0]["hits"]["total"]["value"]), (200, 12))
    eq((r[1]["status"], len(r[1]["hits"]["hits"])), (200, 1))
    eq((r[2]["status"], r[2]["error"]["type"]), (404, "index_not_found_exception"))
    eq((r[3]["status"], r[3]["error"]["type"]), (400, "parsing_exception"))
    error_is(n.req("POST", "/_msearch", ""), 400, "action_request_validation_exception")


@test
def scroll_api():
    n = node()
    load_search_index(n, "sc1", 2)
    st, b = n.req("POST", "/sc1/_search?scroll=1m", {"size": 10, "sort": ["_doc"]})
    eq(st, 200)
    sid = b["_scroll_id"]
    ids = [x["_id"] for x in b["hits"]["hits"]]
    # writes after the scroll started are not seen (point in time)
    n.req("PUT", "/sc1/_doc/new?refresh=true", {"n": 99})
    while True:
        st, b = n.req("POST", "/_search/scroll", {"scroll": "1m", "scroll_id": sid})
        eq(st, 200)
        eq(b["hits"]["total"]["value"], 25)
        if not b["hits"]["hits"]:
            break
        ids += [x["_id"] for x in b["hits"]["hits"]]
        assert len(ids) <= 25
    eq(sorted(ids, key=int), [str(i) for i in range(25)])
    st, b = n.req("GET", "/_search/scroll?scroll=1m&scroll_id=" + sid)
    eq(st, 200)
    st, b = n.req("DELETE", "/_search/scroll", {"scroll_id": [sid]})
    eq((st, b), (200, {"succeeded": True, "num_freed": 2}))  # one context per shard, as ES
    error_is(n.req("POST", "/_search/scroll", {"scroll": "1m", "scroll_id": sid}), 404,
             "search_context_missing_exception")
    st, b = n.req("DELETE", "/_search/scroll", {"scroll_id": sid})
    eq((st, b["num_freed"]), (404, 0))
    error_is(n.req("POST", "/sc1/_search?scroll=soon"), 400, "illegal_argument_exception")
    error_is(n.req("POST", "/_search/scroll", {}), 400, "action_request_validation_exception")
    st, b = n.req("POST", "/sc1/_search?scroll=1m&size=1")
    st, b = n.req("DELETE", "/_search/scroll/_all")
    eq(st, 200)
    assert b["num_freed"] >= 1


@test
def delete_by_query_api():
    n = node()
    load_search_index(n, "dq1", 3)
    st, b = n.req("POST", "/dq1/_delete_by_query?refresh=true", {"query": {"term": {"tag": "odd"}}})
    eq(st, 200)
    eq((b["deleted"], b["total"], b["timed_out"], b["failures"]), (12, 12, False, []))
    eq(n.req("GET", "/dq1/_count")[1]["count"], 13)
    eq(n.req("GET", "/dq1/_doc/1")[0], 404)
    st, b = n.req("POST", "/dq1/_delete_by_query?q=n:0&refresh=true")
    eq(b["deleted"], 1)
    error_is(n.req("POST", "/dq1/_delete_by_query", {}), 400, "action_request_validation_exception")
    error_is(n.req("POST", "/nope/_delete_by_query", {"query": {"match_all": {}}}), 404,
             "index_not_found_exception")


@test
def garbage_never_crashes():
    """Malformed input of every kind gets a 4xx, never a crash or a 5xx."""
    import random
    n = fresh("gb1")
    n.req("PUT", "/gb1/_doc/1?refresh=true", {"a": "x", "n": 1})
    rng = random.Random(5)
    deep = "[" * 5000 + "]" * 5000
    deep_q = '{"query":' + '{"bool":{"must":' * 300 + '{"match_all":{}}' + '}}' * 300 + '}'
    bodies = ["", "{", "}", "null", "[]", "123", '"str"', "{\"a\":}", deep, deep_q,
              '{"query":{"match":{"a":{"query":["x"]}}}}', '{"size":-1}', '{"from":"x"}',
              '{"query":{"range":{"n":{"gte":"abc"}}}}', '{"sort":[{"n":"sideways"}]}',
              '{"aggs":{"x":{"terms":{"field":"n","size":-5}}}}', '{"query":{"term":{}}}',
              '{"query":{"bool":{"must":{"bogus":1}}}}', "\xff\xfe garbage",
              '{"query":{"query_string":{"query":"a AND (b OR"}}}',
              '{"query":{"regexp":{"a":"[[[["}}}', '{"query":{"wildcard":{"a":"' + "*" * 500 + '"}}}',
              '{"size":100000000}', '{"track_total_hits":"yes"}',
              '{"search_after":[1,2,3]}', '{"_source":{"includes":5}}']
    bodies += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
               for _ in range(10)]
    paths = [("POST", "/gb1/_search"), ("POST", "/gb1/_count"), ("POST", "/_msearch"),
             ("POST", "/gb1/_delete_by_query"), ("PUT", "/gb1/_doc/g"), ("POST", "/gb1/_update/1"),
             ("POST", "/_mget"), ("POST", "/_bulk"), ("PUT", "/gb1/_mapping"),
             ("PUT", "/gb1/_settings"), ("PUT", "/gbx"), ("POST", "/_search/scroll")]
    for method, path in paths:
        for body in bodies:
            st, h, data = n.raw(method, path, body)
            assert 200 <= st < 500, (method, path, body[:80], st, data[:300])
    for q in ["a:(", "\"unterminated", "a:[1 TO", "/re[gex/", "*:*", "a:b:c", "((((((", "NOT",
              "a~5", "a^x", "n:>=abc"]:
        from urllib.parse import quote
        st, h, data = n.raw("GET", "/gb1/_search?q=" + quote(q))
        assert 200 <= st < 500, (q, st, data[:300])
    eq(n.req("GET", "/")[0], 200, "still alive")


@test
def concurrent_mixed_load():
    """Bulk, search, update, scroll, _cat, count and delete from 12 threads
    at once: no 5xx, no hang, and the counts agree afterwards."""
    import random
    import threading
    n = fresh("cm1", {"settings": {"number_of_shards": 3, "refresh_interval": "100ms"}})
    errors = []

    def worker(k):
        m = Node(data=n.data, start=False)
        m.port = n.port
        rng = random.Random(k)
        for i in range(60):
            r = rng.random()
            if r < 0.3:
                st, b = m.bulk([{"index": {"_id": str(rng.randrange(300))}},
                                {"n": i, "t": "word%d" % (i % 7)}] * 5, "/cm1/_bulk")
            elif r < 0.5:
                st, b = m.req("POST", "/cm1/_search", {"query": {"match": {"t": "word3"}}})
            elif r < 0.6:
                st, b = m.req("POST", "/cm1/_update/%d?retry_on_conflict=5" % rng.randrange(300),
                              {"doc": {"u": i}, "doc_as_upsert": True})
            elif r < 0.7:
                st, b = m.req("GET", "/cm1/_search?scroll=1m&size=2")
            elif r < 0.8:
                st, b = m.req("GET", "/_cat/indices?format=json")
            elif r < 0.9:
                st, b = m.req("POST", "/cm1/_count", {"query": {"range": {"n": {"gte": 10}}}})
            else:
                st, b = m.req("DELETE", "/cm1/_doc/%d" % rng.randrange(300))
            if st >= 500 or (st >= 400 and st != 404):
                errors.append((st, b))
        m.close_conn()
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(12)]
    [t.start() for t in ts]
    [t.join(90) for t in ts]
    assert not any(t.is_alive() for t in ts), "hung"
    eq(errors[:3], [], "errors under load")
    n.refresh("cm1")
    st, b = n.req("POST", "/cm1/_search", {"size": 0, "track_total_hits": True})
    eq(b["hits"]["total"]["value"], n.req("GET", "/cm1/_count")[1]["count"])
    n.req("DELETE", "/_search/scroll/_all")


# ---------------- process ----------------

@test
def restart_keeps_everything():
    with Node() as m:
        m.req("PUT", "/p1", {"settings": {"number_of_shards": 2, "refresh_interval": "5s"},
                             "mappings": {"properties": {"k": {"type": "keyword"}}}})
        m.bulk([{"index": {"_id": str(i)}} if j == 0 else {"k": "v%d" % i, "x": i}
                for i in range(50) for j in range(2)], "/p1/_bulk")
        m.req("PUT", "/p1/_doc/7", {"k": "seven"})   # version 2, not refreshed
        m.req("DELETE", "/p1/_doc/8")
        m.stop()
        m.start()
        s = m.req("GET", "/p1/_settings")[1]["p1"]["settings"]["index"]
        eq((s["number_of_shards"], s["refresh_interval"]), ("2", "5s"))
        eq(m.req("GET", "/p1/_mapping")[1]["p1"]["mappings"]["properties"]["k"], {"type": "keyword"})
        b = m.req("GET", "/p1/_doc/7")[1]
        eq((b["_version"], b["_source"]), (2, {"k": "seven"}))
        eq(m.req("GET", "/p1/_doc/8")[0], 404)
        eq(m.req("GET", "/p1/_count")[1]["count"], 49, "replayed docs searchable after restart")
        m.kill()
        m.start()
        eq(m.req("GET", "/p1/_count")[1]["count"], 49, "after kill -9")


@test
def second_node_same_data_dir_refused():
    import subprocess
    from shoal import shoal_bin, free_port
    with Node() as m:
        p = subprocess.run([shoal_bin(), "--solo", "--data", m.data, "--http",
                            "127.0.0.1:%d" % free_port()], capture_output=True, timeout=20)
        assert p.returncode != 0
        assert b"in use by another shoal node" in p.stderr, p.stderr
        eq(m.req("GET", "/")[0], 200, "first node unaffected")
        eq(m.stop(), 0, "clean exit on SIGTERM")


@test
def bad_command_lines():
    import subprocess
    from shoal import shoal_bin
    for args in [[], ["--solo"], ["--solo", "--data", "/tmp/x", "--http", "nope"],
                 ["--solo", "--data", "/tmp/x", "--bogus"]]:
        p = subprocess.run([shoal_bin()] + args, capture_output=True, timeout=10)
        eq(p.returncode, 2, str(args))
        assert b"usage" in p.stderr or b"--http" in p.stderr, p.stderr



@test
def sort_on_mapped_field_with_empty_shards():
    # 4 shards, 1 document: three shards hold no value of "age"; the field is
    # mapped, so they count as missing values, not as an unmapped field.
    n = node()
    st, _ = n.req("PUT", "/sparse", {"settings": {"number_of_shards": 4},
                                     "mappings": {"properties": {"age": {"type": "long"},
                                                                 "title": {"type": "text"}}}})
    eq(st, 200)
    st, _ = n.req("PUT", "/sparse/_doc/1?refresh=true", {"age": 7, "title": "x"})
    eq(st, 201)
    st, b = n.req("POST", "/sparse/_search", {"sort": [{"age": "desc"}]})
    eq(st, 200, "sort %s" % b)
    eq(b["_shards"]["failed"], 0, "no shard fails the sort")
    eq([h["_id"] for h in b["hits"]["hits"]], ["1"])
    eq(b["hits"]["hits"][0]["sort"], [7])
    st, b = n.req("POST", "/sparse/_search", {"sort": [{"nope": "asc"}]})
    eq(st, 400, "unmapped %s" % b)
    st, b = n.req("POST", "/sparse/_search", {"sort": [{"title": "asc"}]})
    eq(st, 400, "text %s" % b)
    n.req("DELETE", "/sparse")


@test
def sort_on_dynamic_field_with_empty_shards():
    # the field is mapped by the first document: shards that never get a
    # document (so never refresh a new view) see it mapped too
    n = node()
    st, _ = n.req("PUT", "/sparse2", {"settings": {"number_of_shards": 5}})
    eq(st, 200)
    st, _ = n.req("PUT", "/sparse2/_doc/1?refresh=true", {"age": 7})
    eq(st, 201)
    for body in ({"sort": [{"age": "desc"}]}, {"sort": ["age"], "aggs": {"m": {"max": {
            "field": "age"}}}}):
        st, b = n.req("POST", "/sparse2/_search", body)
        eq((st, b["_shards"]["failed"]), (200, 0), "sort %s: %s" % (body, b))
        eq([h["sort"] for h in b["hits"]["hits"]], [[7]])
    # a mapping change alone (no document) reaches every shard too
    st, _ = n.req("PUT", "/sparse2/_mapping", {"properties": {"late": {"type": "keyword"}}})
    eq(st, 200)
    st, b = n.req("POST", "/sparse2/_search", {"sort": [{"late": "asc"}]})
    eq((st, b["_shards"]["failed"]), (200, 0), "sort on a field mapped late: %s" % b)
    n.req("DELETE", "/sparse2")



@test
def total_as_int_keeps_every_other_number():
    # rest_total_hits_as_int rewrites hits.total (and inner hits' totals)
    # only: doubles keep all 17 digits, longs past 2^53 every digit
    n = node()
    st, _ = n.req("PUT", "/tai", {"mappings": {"properties": {
        "i": {"type": "integer"}, "big": {"type": "long"},
        "kids": {"type": "nested", "properties": {"k": {"type": "keyword"}}}}}})
    eq(st, 200)
    lines = []
    for i, v in enumerate((1, 51, 101, 151)):
        lines += [{"index": {"_index": "tai", "_id": str(i)}},
                  {"i": v, "big": 9007199254740993 + 2 * i, "kids": [{"k": "a"}, {"k": "b"}]}]
    st, b = n.bulk(lines, params="?refresh=true")
    eq(b["errors"], False)
    body = {"size": 1, "sort": [{"big": "desc"}],
            "query": {"nested": {"path": "kids", "query": {"match_all": {}},
                                 "inner_hits": {"size": 1}}},
            "aggs": {"f": {"filter": {"range": {"i": {"gte": 50}}},
                           "aggs": {"s": {"extended_stats": {"field": "i"}}}}}}
    for params in ("", "?rest_total_hits_as_int=true"):
        st, b = n.req("POST", "/tai/_search" + params, body)
        eq(st, 200, "search%s: %s" % (params, b))
        if params:
            eq(b["hits"]["total"], 4, "total as a number")
            ih = b["hits"]["hits"][0]["inner_hits"]["kids"]["hits"]
            eq(ih["total"], 2, "inner hits total as a number")
        else:
            eq(b["hits"]["total"], {"value": 4, "relation": "eq"}, "total object")
        # sqrt(5000 / 3): 15 digits would read back as another double
        eq(b["aggregations"]["f"]["s"]["std_deviation"], 40.824829046386306,
           "std digits%s" % params)
        eq(b["hits"]["hits"][0]["sort"], [9007199254740999], "long sort value%s" % params)
    st, b = n.req("POST", "/tai/_search?rest_total_hits_as_int=true&track_total_hits=false",
                  {"size": 0})
    eq(b["hits"]["total"], -1, "not tracked: -1")
    n.req("DELETE", "/tai")


if __name__ == "__main__":
    run_tests(budget_s=150, teardown=lambda: N.cleanup() if N else None)
