"""The Elasticsearch surface tools rely on (issue 13), against a solo node
and a 3-node cluster, each answer checked for Elasticsearch's shape:
the wire (X-Elastic-Product, versioned media types, _license, _xpack,
_nodes/_all/http sniffing), the fields a search returns (fields,
docvalue_fields, stored_fields, version, seq_no_primary_term, explain),
aliases and index templates."""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, error_is, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-surface-test-")
NAMES = ["node-1", "node-2", "node-3"]
SOLO = None
CLUSTER = {}
PORTS = {}


def solo():
    global SOLO
    if SOLO is None:
        SOLO = Node()
    return SOLO


def cluster():
    if not CLUSTER:
        cfile = os.path.join(TMP, "cluster.json")
        PORTS.update(cluster_file(cfile, [(n, None) for n in NAMES]))
        for n in NAMES:
            d = os.path.join(TMP, n)
            os.makedirs(d, exist_ok=True)
            CLUSTER[n] = ClusterNode(cfile, n, PORTS[n][0], data=d)
        for n in NAMES:
            st, b = CLUSTER[n].req("GET", "/_cluster/health?wait_for_nodes=3&timeout=60s",
                                   timeout=80)
            eq((st, b.get("number_of_nodes")), (200, 3), "3 nodes seen by " + n)
    return CLUSTER


def targets():
    """(label, node to ask) for the solo node and every cluster node."""
    out = [("solo", solo())]
    out += [(n, c) for n, c in cluster().items()]
    return out


def vnd(v, kind="json"):
    return "application/vnd.elasticsearch+%s; compatible-with=%d" % (kind, v)


# ---- the wire ----

@test
def product_header_on_every_reply():
    for label, n in targets():
        for method, path in (("GET", "/"), ("GET", "/_cluster/health"), ("GET", "/nope/_search"),
                             ("GET", "/_no_such_endpoint")):
            st, h, _ = n.raw(method, path)
            eq(h.get("x-elastic-product"), "Elasticsearch",
               "%s %s on %s (status %d)" % (method, path, label, st))


@test
def versioned_media_types():
    n = solo()
    for v in (7, 8, 9):
        st, h, data = n.raw("GET", "/", headers={"Accept": vnd(v)})
        eq(st, 200, "GET / compatible-with=%d" % v)
        eq(h["content-type"], "application/vnd.elasticsearch+json;compatible-with=%d" % v,
           "answered in kind")
        eq(json.loads(data)["tagline"], "You Know, for Search", "body")
        # a body in the versioned type, answered in the same version
        st, h, data = n.raw("PUT", "/media%d/_doc/1?refresh=true" % v, {"a": v},
                            headers={"Content-Type": vnd(v), "Accept": vnd(v)})
        eq((st, json.loads(data)["result"]), (201, "created"), "index with vnd json")
        eq(h["content-type"], "application/vnd.elasticsearch+json;compatible-with=%d" % v, "type")
        st, h, data = n.raw("POST", "/media%d/_search" % v, {"query": {"term": {"a": v}}},
                            headers={"Content-Type": vnd(v), "Accept": vnd(v)})
        eq((st, json.loads(data)["hits"]["total"]["value"]), (200, 1), "search with vnd json")
        body = '{"index":{"_index":"media%d","_id":"2"}}\n{"a":%d}\n' % (v, v)
        st, h, data = n.raw("POST", "/_bulk", body, headers={
            "Content-Type": vnd(v, "x-ndjson"), "Accept": vnd(v)})
        eq((st, json.loads(data)["errors"]), (200, False), "bulk with vnd x-ndjson")
    # text replies keep their type
    st, h, _ = n.raw("GET", "/_cat/indices", headers={"Accept": vnd(8)})
    eq((st, h["content-type"].startswith("text/plain")), (200, True), "_cat stays text")
    # plain JSON stays plain
    st, h, _ = n.raw("GET", "/")
    eq(h["content-type"].startswith("application/json"), True, "plain json")


@test
def versioned_media_types_refused():
    n = solo()
    cases = [
        ({"Accept": vnd(10)}, None, "Accept version must be one of versions 7 to 9, but found 10"),
        ({"Accept": vnd(6)}, None, "but found 6"),
        ({"Accept": "application/vnd.elasticsearch+json"}, None, "Accept version"),
        ({"Content-Type": vnd(7), "Accept": vnd(8)}, {"query": {"match_all": {}}},
         "the compatible versions must match"),
        ({"Content-Type": vnd(8), "Accept": "application/json"}, {"query": {"match_all": {}}},
         "A compatible version is required on both Content-Type and Accept headers"),
        ({"Content-Type": vnd(10)}, {"query": {"match_all": {}}},
         "Content-Type version must be one of versions 7 to 9, but found 10"),
        ({"Content-Type": vnd(9), "Accept": vnd(8)}, {"query": {"match_all": {}}},
         "the compatible versions must match"),
    ]
    for hdrs, body, why in cases:
        st, h, data = n.raw("POST" if body else "GET", "/_search" if body else "/", body,
                            headers=hdrs)
        b = json.loads(data)
        error_is((st, b), 400, "media_type_header_exception",
                 "Invalid media-type value on headers [Accept, Content-Type]")
        eq(b["error"]["caused_by"]["type"], "status_exception", "caused_by %s" % hdrs)
        assert why in b["error"]["caused_by"]["reason"], (why, b)
        eq(h.get("x-elastic-product"), "Elasticsearch", "header on the error")


@test
def license_and_xpack():
    uids = set()
    for label, n in targets():
        st, b = n.req("GET", "/_license")
        eq(st, 200, "_license on " + label)
        lic = b["license"]
        eq((lic["type"], lic["status"], lic["issuer"], lic["max_nodes"],
            lic["start_date_in_millis"]), ("basic", "active", "elasticsearch", 1000, -1),
           "basic license on " + label)
        for k in ("uid", "issue_date", "issue_date_in_millis", "issued_to"):
            assert k in lic, (k, lic)
        st, c = n.req("GET", "/")
        eq(lic["issued_to"], c["cluster_name"], "issued to the cluster")
        if label != "solo":
            uids.add(lic["uid"])
        st, b = n.req("GET", "/_xpack")
        eq(st, 200, "_xpack on " + label)
        eq((b["license"]["type"], b["license"]["mode"], b["license"]["status"]),
           ("basic", "basic", "active"), "_xpack license")
        eq(b["license"]["uid"], lic["uid"], "same uid")
        assert set(b["build"]) == {"hash", "date"}, b["build"]
        eq(b["features"]["security"], {"available": True, "enabled": False},
           "security off without users")
        eq(b["features"]["ml"], {"available": False, "enabled": False}, "ml not in basic")
        for f in b["features"].values():
            eq(sorted(f), ["available", "enabled"], "feature shape")
        st, b = n.req("GET", "/_xpack?categories=license")
        eq((st, sorted(b)), (200, ["license", "tagline"]), "categories=license")
        error_is(n.req("GET", "/_xpack?categories=bogus"), 400, "illegal_argument_exception",
                 "Unknown category [bogus]")
    eq(len(uids), 1, "one license uid across the cluster")


@test
def nodes_http_for_sniffing():
    for label, n in targets():
        expect = ({"127.0.0.1:%d" % n.port} if label == "solo"
                  else {"127.0.0.1:%d" % PORTS[x][0] for x in NAMES})
        for path in ("/_nodes/_all/http", "/_nodes/http", "/_nodes/_all/http,transport"):
            st, b = n.req("GET", path)
            eq(st, 200, path + " on " + label)
            got = {e["http"]["publish_address"] for e in b["nodes"].values()}
            eq(got, expect, "publish addresses via %s %s" % (label, path))
            eq(b["_nodes"]["total"], len(expect), "total")
            for e in b["nodes"].values():
                for k in ("name", "version", "roles", "host", "ip"):
                    assert k in e, (k, e)
                eq(e["http"]["bound_address"], [e["http"]["publish_address"]], "bound")
        # another metric leaves http out; a node selector narrows the list
        st, b = n.req("GET", "/_nodes/_all/settings")
        eq(st, 200, "settings metric")
        eq(any("http" in e for e in b["nodes"].values()), False, "http left out")
        st, b = n.req("GET", "/_nodes/_local/http")
        eq(len(b["nodes"]), 1, "_local is one node via " + label)
        name = list(b["nodes"].values())[0]["name"]
        if label != "solo":
            eq(name, label, "_local is the node asked")
            st, b = n.req("GET", "/_nodes/node-2,node-3/http")
            eq(sorted(e["name"] for e in b["nodes"].values()), ["node-2", "node-3"],
               "two named nodes")
        error_is(n.req("GET", "/_nodes/_all/bogus"), 400, "illegal_argument_exception",
                 "unrecognized metric: [bogus]")


# ---- returning fields ----

FMAP = {"properties": {
    "t": {"type": "text", "fields": {"raw": {"type": "keyword"}}},
    "k": {"type": "keyword", "ignore_above": 5},
    "n": {"type": "long"}, "x": {"type": "float"}, "dbl": {"type": "double"},
    "d": {"type": "date"}, "e": {"type": "date", "format": "yyyy/MM/dd"},
    "b": {"type": "boolean"}, "o": {"properties": {"s": {"type": "keyword"}}},
    "off": {"type": "object", "enabled": False}}}
FDOCS = {
    "1": {"t": "Hello World", "k": ["b", "a", "b", "toolong"], "n": ["7", 3.9], "x": 0.1,
          "dbl": 2.5, "d": "2026-12-01T10:00:00Z", "e": "2026/12/01", "b": "true",
          "o": [{"s": "z"}, {"s": "y"}], "off": {"q": 1}},
    "2": {"t": "second", "k": "c", "n": 1, "d": 1796083200000, "b": False},
}


def fields_index(n, name, shards):
    st, b = n.req("PUT", "/" + name, {"settings": {"number_of_shards": shards,
                                                   "number_of_replicas": 1 if shards > 1 else 0},
                                      "mappings": FMAP})
    eq(st, 200, "create %s: %s" % (name, b))
    lines = []
    for i, d in FDOCS.items():
        lines += [{"index": {"_index": name, "_id": i}}, d]
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk: %s" % b)


def fields_targets():
    out = []
    s = solo()
    fields_index(s, "fv", 1)
    out.append(("solo", s))
    c = cluster()
    fields_index(c["node-1"], "fv", 3)
    out += [(x, c[x]) for x in NAMES]
    return out


def hits_by_id(b):
    return {h["_id"]: h for h in b["hits"]["hits"]}


FT = []


def ftargets():
    if not FT:
        FT.extend(fields_targets())
    return FT


@test
def fields_api():
    for label, n in ftargets():
        st, b = n.req("POST", "/fv/_search", {"fields": ["*"], "_source": False,
                                             "sort": [{"n": "asc"}]})
        eq(st, 200, "fields on %s: %s" % (label, b))
        h = hits_by_id(b)
        eq("_source" in h["1"], False, "_source: false")
        eq(h["1"]["fields"], {
            "t": ["Hello World"], "t.raw": ["Hello World"], "k": ["b", "a", "b"], "n": [7, 3],
            "x": [0.1], "dbl": [2.5], "d": ["2026-12-01T10:00:00.000Z"], "e": ["2026/12/01"],
            "b": [True], "o.s": ["z", "y"]}, "fields of doc 1 on " + label)
        eq(h["2"]["fields"], {"t": ["second"], "t.raw": ["second"], "k": ["c"], "n": [1],
                              "d": ["2026-12-01T00:00:00.000Z"], "b": [False]},
           "fields of doc 2 on " + label)
        # patterns, formats, unmapped values
        st, b = n.req("POST", "/fv/_search", {
            "query": {"ids": {"values": ["1"]}},
            "fields": [{"field": "d", "format": "epoch_millis"}, {"field": "e", "format": "yyyy-MM-dd"},
                       "o.*", {"field": "off*", "include_unmapped": "true"}]})
        eq(st, 200, "formats on " + label)
        hit = b["hits"]["hits"][0]
        eq(hit["fields"], {"d": ["1796119200000"], "e": ["2026-12-01"], "o.s": ["z", "y"],
                           "off.q": [1]}, "formats and unmapped on " + label)
        eq(hit["_source"], FDOCS["1"], "_source still there when not turned off")
        # no value for any asked field: no "fields" key at all
        st, b = n.req("POST", "/fv/_search", {"query": {"ids": {"values": ["2"]}},
                                             "fields": ["x", "nope"]})
        eq("fields" in b["hits"]["hits"][0], False, "no fields key when empty")


@test
def docvalue_fields_and_stored_fields():
    for label, n in ftargets():
        st, b = n.req("POST", "/fv/_search", {
            "query": {"ids": {"values": ["1"]}},
            "docvalue_fields": ["k", "n", "x", {"field": "d", "format": "yyyy-MM-dd"}, "b",
                                "o.*", "t.raw", {"field": "e", "format": "use_field_mapping"}],
            "stored_fields": ["*"], "script_fields": {}, "runtime_mappings": {}})
        eq(st, 200, "docvalue_fields on %s: %s" % (label, b))
        hit = b["hits"]["hits"][0]
        eq(hit["fields"], {"t.raw": ["Hello World"], "k": ["a", "b"], "n": [3, 7],
                           "x": [0.10000000149011612], "d": ["2026-12-01"], "b": [True],
                           "o.s": ["y", "z"], "e": ["2026/12/01"]},
           "doc-value form (sorted, keywords deduplicated, floats widened) on " + label)
        eq(("_source" in hit, hit["_id"]), (False, "1"), "stored_fields without _source")
        # the URL forms
        st, b = n.req("GET", "/fv/_search?q=k:a&stored_fields=_source&docvalue_fields=n,d")
        hit = b["hits"]["hits"][0]
        eq((st, hit["_source"], hit["fields"]),
           (200, FDOCS["1"], {"n": [3, 7], "d": ["2026-12-01T10:00:00.000Z"]}), "URL form")
        st, b = n.req("POST", "/fv/_search", {"stored_fields": "_none_", "size": 5})
        eq(st, 200, "_none_")
        for hit in b["hits"]["hits"]:
            eq(sorted(hit), ["_index", "_score", "_type"], "_none_ leaves metadata out")
        st, b = n.req("POST", "/fv/_search", {"stored_fields": ["*"], "_source": True,
                                             "query": {"ids": {"values": ["2"]}}})
        eq(b["hits"]["hits"][0]["_source"], FDOCS["2"], "elasticdump's stored_fields + _source")
        # refusals, each a 400 naming the problem
        st, b = n.req("POST", "/fv/_search", {"docvalue_fields": ["t"]})
        eq((st, b["status"], b["error"]["root_cause"][0]["type"]),
           (400, 400, "illegal_argument_exception"), "docvalue_fields on text via " + label)
        assert "Text fields are not optimised" in b["error"]["root_cause"][0]["reason"], b
        error_is(n.req("POST", "/fv/_search", {"stored_fields": "_none_", "_source": True}), 400,
                 "illegal_argument_exception",
                 "[stored_fields] cannot be disabled if [_source] is requested")
        error_is(n.req("POST", "/fv/_search", {"script_fields": {"s": {"script": "1"}}}), 400,
                 "illegal_argument_exception", "[script_fields] is not supported")
        error_is(n.req("POST", "/fv/_search", {"runtime_mappings": {"r": {"type": "long"}}}),
                 400, "illegal_argument_exception", "[runtime_mappings] is not supported")
        error_is(n.req("POST", "/fv/_search", {"fields": [{"field": "d", "format": "yyyy-qq"}]}),
                 400, "illegal_argument_exception", "Invalid format")
        error_is(n.req("POST", "/fv/_search", {"fields": "d"}), 400, "parsing_exception")
        error_is(n.req("POST", "/fv/_search", {"docvalue_fields": ["f%d" % i for i in range(101)]}),
                 400, "illegal_argument_exception", "Trying to retrieve too many docvalue_fields")


@test
def version_seq_no_explain():
    for label, n in ftargets():
        st, b = n.req("POST", "/fv/_search", {"version": True, "seq_no_primary_term": True,
                                             "explain": True, "query": {"match": {"t": "hello"}}})
        eq((st, b["hits"]["total"]["value"]), (200, 1), "search on " + label)
        hit = b["hits"]["hits"][0]
        eq((hit["_version"], hit["_primary_term"]), (1, 1), "version and term on " + label)
        eq(isinstance(hit["_seq_no"], int) and hit["_seq_no"] >= 0, True, "seq_no")
        ex = hit["_explanation"]
        eq(abs(ex["value"] - hit["_score"]) < 1e-6, True, "explanation value is the score")
        eq((isinstance(ex["description"], str), ex["details"]), (True, []), "explanation shape")
        st, b = n.req("POST", "/fv/_search", {"query": {"match": {"t": "hello"}}})
        eq(any(k in b["hits"]["hits"][0] for k in ("_version", "_seq_no", "_explanation")),
           False, "none of them unless asked")


# ---- aliases ----

def alias_setup(n, shards):
    for name, body in (("al1", {"aliases": {"al-all": {}, "al-w": {"is_write_index": True}}}),
                       ("al2", {}), ("al3", {})):
        st, b = n.req("PUT", "/" + name, dict(body, settings={
            "number_of_shards": shards, "number_of_replicas": 1 if shards > 1 else 0}))
        eq(st, 200, "create %s: %s" % (name, b))
    eq(n.req("PUT", "/al2/_alias/al-all"), (200, {"acknowledged": True}), "PUT _alias")
    st, b = n.req("POST", "/_aliases", {"actions": [
        {"add": {"index": "al2", "alias": "al-red", "filter": {"term": {"c": "red"}},
                 "routing": "1"}},
        {"add": {"indices": ["al1", "al2"], "alias": "al-multi"}},
        {"add": {"index": "al3", "alias": "al-gone"}}]})
    eq((st, b), (200, {"acknowledged": True}), "POST _aliases")
    lines = []
    for i, (ix, c) in enumerate((("al-w", "red"), ("al2", "red"), ("al2", "blue"),
                                 ("al2", "blue"))):
        lines += [{"index": {"_index": ix, "_id": str(i)}}, {"c": c, "i": i}]
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b["errors"]), (200, False), "bulk through an alias: %s" % b)
    eq(b["items"][0]["index"]["_index"], "al1", "the write index took it")


AT = []


def atargets():
    if not AT:
        s = solo()
        alias_setup(s, 1)
        AT.append(("solo", s))
        c = cluster()
        alias_setup(c["node-2"], 3)
        AT.extend((x, c[x]) for x in NAMES)
    return AT


def total(n, path, body=None):
    st, b = n.req("POST", path, body or {})
    eq(st, 200, "%s: %s" % (path, b))
    return b["hits"]["total"]["value"]


@test
def alias_reads_and_searches():
    for label, n in atargets():
        st, b = n.req("GET", "/al*/_alias")
        eq(st, 200, "GET /al*/_alias on " + label)
        eq(b, {"al1": {"aliases": {"al-all": {}, "al-w": {"is_write_index": True},
                                    "al-multi": {}}},
               "al2": {"aliases": {"al-all": {}, "al-multi": {},
                                   "al-red": {"filter": {"term": {"c": "red"}},
                                              "index_routing": "1", "search_routing": "1"}}},
               "al3": {"aliases": {"al-gone": {}}}}, "aliases via " + label)
        st, b = n.req("GET", "/_alias/al-red")
        eq((st, b), (200, {"al2": {"aliases": {"al-red": {
            "filter": {"term": {"c": "red"}}, "index_routing": "1", "search_routing": "1"}}}}),
           "GET /_alias/{name} on " + label)
        st, b = n.req("GET", "/al1/_alias/al-*")
        eq(sorted(b["al1"]["aliases"]), ["al-all", "al-multi", "al-w"], "index + pattern")
        st, b = n.req("GET", "/_alias/al-all,nope")
        eq((st, b["status"], b["error"], sorted(k for k in b if k.startswith("al"))),
           (404, 404, "alias [nope] missing", ["al1", "al2"]), "a missing alias")
        st, _, _ = n.raw("HEAD", "/_alias/al-all")
        eq(st, 200, "HEAD existing")
        st, _, _ = n.raw("HEAD", "/_alias/nope")
        eq(st, 404, "HEAD missing")
        st, b = n.req("GET", "/al1")
        eq(sorted(b["al1"]["aliases"]), ["al-all", "al-multi", "al-w"], "GET /{index}")
        st, rows = n.req("GET", "/_cat/aliases/al-*?format=json")
        eq(sorted((r["alias"], r["index"], r["filter"], r["routing.index"], r["routing.search"],
                   r["is_write_index"]) for r in rows),
           [("al-all", "al1", "-", "-", "-", "-"), ("al-all", "al2", "-", "-", "-", "-"),
            ("al-gone", "al3", "-", "-", "-", "-"),
            ("al-multi", "al1", "-", "-", "-", "-"), ("al-multi", "al2", "-", "-", "-", "-"),
            ("al-red", "al2", "*", "1", "1", "-"), ("al-w", "al1", "-", "-", "-", "true")],
           "_cat/aliases on " + label)
        st, text = n.req("GET", "/_cat/aliases/al-w?v")
        eq(text.split("\n")[0].split(), ["alias", "index", "filter", "routing.index",
                                          "routing.search", "is_write_index"], "header")
        # searching through aliases: one over several indices, a filtered one
        eq(total(n, "/al-all/_search"), 4, "al-all searches al1 and al2 on " + label)
        eq(total(n, "/al-multi,al1/_search"), 4, "an alias and its index: no double count")
        eq(total(n, "/al-red/_search"), 1, "filtered alias on " + label)
        eq(total(n, "/al-red/_search", {"query": {"term": {"i": 1}}}), 1, "filter AND query")
        eq(total(n, "/al-red/_search", {"query": {"term": {"i": 2}}}), 0, "filter excludes")
        st, b = n.req("POST", "/al-red/_count")
        eq((st, b["count"]), (200, 1), "_count through a filtered alias")
        body = '{"index":"al-red"}\n{}\n{"index":"al-all"}\n{}\n'
        st, b = n.req("POST", "/_msearch", body, {"Content-Type": "application/x-ndjson"})
        eq([x["hits"]["total"]["value"] for x in b["responses"]], [1, 4], "_msearch")
        error_is(n.req("POST", "/al-red,al1/_search", {}), 400, "illegal_argument_exception",
                 "different alias filters")
        st, b = n.req("GET", "/al-w/_doc/0")
        eq((st, b["_index"], b["found"]), (200, "al1", True), "GET through an alias")


@test
def alias_writes_and_refusals():
    for label, n in atargets():
        error_is(n.req("PUT", "/al-multi/_doc/x", {"c": "x"}), 400, "illegal_argument_exception",
                 "no write index is defined for alias [al-multi]")
        error_is(n.req("DELETE", "/al-all"), 400, "illegal_argument_exception",
                 "matches an alias, specify the corresponding concrete indices instead")
        error_is(n.req("PUT", "/al-all", {}), 400, "invalid_index_name_exception",
                 "already exists as alias")
        error_is(n.req("POST", "/_aliases", {"actions": [
            {"add": {"index": "al2", "alias": "al-w", "is_write_index": True}}]}), 400,
            "illegal_state_exception", "alias [al-w] has more than one write index")
        error_is(n.req("POST", "/_aliases", {"actions": [{"add": {"index": "al2", "alias": "al1"}}]}),
                 400, "invalid_alias_name_exception", "exists with the same name as the alias")
        error_is(n.req("PUT", "/al2/_alias/Bad"), 400, "invalid_alias_name_exception",
                 "must be lowercase")
        error_is(n.req("PUT", "/nope/_alias/x"), 404, "index_not_found_exception")
        error_is(n.req("DELETE", "/al2/_alias/nope"), 404, "aliases_not_found_exception",
                 "aliases [nope] missing")
        error_is(n.req("POST", "/_aliases", {"actions": [
            {"add": {"index": "al2", "alias": "al-bad", "filter": {"nosuch": {}}}}]}), 400,
            "parsing_exception")
        error_is(n.req("POST", "/_aliases", {"actions": []}), 400,
                 "action_request_validation_exception")
        error_is(n.req("POST", "/_aliases", {"actions": [{"explode": {"index": "al2"}}]}), 400,
                 "parsing_exception", "unknown action [explode]")
        # index_routing: a write through the alias routes by it, a conflicting one is refused
        st, b = n.req("PUT", "/al-red/_doc/r1-%s?refresh=true" % label, {"c": "pink"})
        eq((st, b["_index"]), (201, "al2"), "write through al-red on " + label)
        st, b = n.req("GET", "/al2/_doc/r1-%s?routing=1" % label)
        eq((st, b["found"]), (200, True), "stored under the alias's routing on " + label)
        st, b = n.req("GET", "/al-red/_doc/r1-" + label)
        eq((st, b["found"]), (200, True), "read back through the alias on " + label)
        error_is(n.req("PUT", "/al-red/_doc/r2?routing=2", {"c": "pink"}), 400,
                 "illegal_argument_exception",
                 "Alias [al-red] has index routing associated with it [1], and was provided "
                 "with routing value [2], rejecting operation")
        st, b = n.bulk([{"index": {"_index": "al-red", "_id": "r3-" + label}}, {"c": "pink"},
                        {"index": {"_index": "al-red", "_id": "r4", "routing": "9"}}, {"c": "pink"}])
        eq((st, b["errors"], b["items"][0]["index"]["status"], b["items"][1]["index"]["status"]),
           (200, True, 201, 400), "bulk through a routed alias on " + label)
        assert "rejecting operation" in b["items"][1]["index"]["error"]["reason"], b
        n.refresh("al2")
        st, b = n.req("GET", "/al2/_doc/r3-%s?routing=1" % label)
        eq(b["found"], True, "bulk item took the alias's routing on " + label)
        # nothing half-applied: a good action before a bad one did not happen
        error_is(n.req("POST", "/_aliases", {"actions": [
            {"add": {"index": "al2", "alias": "al-half"}},
            {"add": {"index": "nope", "alias": "al-half"}}]}), 404, "index_not_found_exception")
        st, b = n.req("GET", "/_alias/al-half")
        eq(st, 404, "no half-applied alias via " + label)


@test
def alias_atomic_swap_and_remove_index():
    """The last test on these indices: moves al-w to al2, removes an alias,
    and drops al3 in one request, seen alike from every node."""
    n0 = atargets()
    for group in (["solo"], NAMES):
        n = dict(n0)[group[0]]
        st, b = n.req("POST", "/_aliases", {"actions": [
            {"remove": {"index": "al1", "alias": "al-w"}},
            {"add": {"index": "al2", "alias": "al-w", "is_write_index": True}},
            {"remove": {"index": "*", "alias": "al-multi"}},
            {"remove_index": {"index": "al3"}}]})
        eq((st, b), (200, {"acknowledged": True}), "swap via " + group[0])
        for label in group:
            m = dict(n0)[label]
            st, b = m.req("GET", "/_alias/al-w")
            eq(b, {"al2": {"aliases": {"al-w": {"is_write_index": True}}}}, "moved on " + label)
            eq(m.req("GET", "/_alias/al-multi")[0], 404, "removed on " + label)
            eq(m.req("HEAD", "/al3")[0], 404, "al3 dropped on " + label)
            st, b = m.req("PUT", "/al-w/_doc/new-%s?refresh=true" % label, {"c": "green"})
            eq((st, b["_index"]), (201, "al2"), "writes follow the alias on " + label)


@test
def delete_by_query_through_a_filtered_alias():
    n = solo()  # _delete_by_query runs on solo nodes only
    for name, body in (("dq", {"aliases": {"dq-red": {"filter": {"term": {"c": "red"}}}}}),):
        eq(n.req("PUT", "/" + name, body)[0], 200, "create")
    lines = []
    for i, c in enumerate(("red", "red", "blue")):
        lines += [{"index": {"_index": "dq", "_id": str(i)}}, {"c": c}]
    eq(n.bulk(lines, params="?refresh=true")[1]["errors"], False, "bulk")
    st, b = n.req("POST", "/dq-red/_delete_by_query?refresh=true", {"query": {"match_all": {}}})
    eq((st, b["deleted"]), (200, 2), "only the alias's documents")
    eq(total(n, "/dq/_search"), 1, "the blue one stays")


@test
def aliases_survive_a_restart():
    n = solo()
    n.restart()
    st, b = n.req("GET", "/_alias/al-w,al-red")
    eq((st, sorted(b["al2"]["aliases"])), (200, ["al-red", "al-w"]), "after restart")
    eq(total(n, "/al-red/_search"), 1, "filter after restart")


# ---- index templates ----

def put_templates(n):
    eq(n.req("PUT", "/_component_template/tc-base", {"template": {
        "settings": {"number_of_shards": 2},
        "mappings": {"properties": {"ts": {"type": "date"}, "msg": {"type": "text"}}}}}),
       (200, {"acknowledged": True}), "component template")
    eq(n.req("PUT", "/_index_template/tlogs", {
        "index_patterns": ["tlogs-*"], "priority": 10, "composed_of": ["tc-base"],
        "template": {"settings": {"index": {"number_of_replicas": 0}},
                     "mappings": {"properties": {"msg": {"type": "keyword"}}},
                     "aliases": {"tlogs": {}}}}), (200, {"acknowledged": True}), "index template")
    eq(n.req("PUT", "/_index_template/tlogs-low", {
        "index_patterns": ["tlogs-*"], "priority": 1,
        "template": {"settings": {"number_of_shards": 5}}})[0], 200, "a lower priority one")
    eq(n.req("PUT", "/_template/told", {"index_patterns": ["told-*"], "order": 1,
                                        "settings": {"number_of_shards": 3},
                                        "aliases": {"tolds": {}}})[0], 200, "legacy")
    eq(n.req("PUT", "/_template/told-0", {"index_patterns": ["told-*"], "order": 0,
                                          "settings": {"number_of_shards": 4,
                                                       "number_of_replicas": 0}})[0], 200,
       "legacy, lower order")


@test
def index_templates_on_auto_creation():
    s = solo()
    put_templates(s)
    c = cluster()
    put_templates(c["node-3"])
    for label, n in [("solo", s)] + [(x, c[x]) for x in NAMES]:
        st, b = n.req("GET", "/_index_template/tlogs")
        eq(st, 200, "GET template on " + label)
        eq(b["index_templates"][0]["name"], "tlogs", "name")
        eq(b["index_templates"][0]["index_template"]["composed_of"], ["tc-base"], "composed_of")
        st, b = n.req("GET", "/_component_template/tc-*")
        eq([t["name"] for t in b["component_templates"]], ["tc-base"], "component on " + label)
        st, b = n.req("GET", "/_template/told*")
        # shown as ES does: under "index", values as strings
        eq((b["told"]["order"], b["told"]["settings"]),
           (1, {"index": {"number_of_shards": "3"}}), "legacy")
        st, b = n.req("POST", "/_index_template/_simulate_index/tlogs-x")
        eq(st, 200, "simulate on " + label)
        eq(b["template"]["settings"]["index"], {"number_of_shards": "2",
                                                "number_of_replicas": "0"}, "simulated settings")
        eq(b["template"]["mappings"], {"properties": {"ts": {"type": "date"},
                                                      "msg": {"type": "keyword"}}},
           "component then template mappings")
        eq(b["template"]["aliases"], {"tlogs": {}}, "simulated aliases")
        eq([o["name"] for o in b["overlapping"]], ["tlogs-low"], "overlapping")
    for label, n in (("solo", s), ("node-1", c["node-1"])):
        day = "tlogs-2026.12.01"
        st, b = n.bulk([{"index": {"_index": day, "_id": "1"}}, {"msg": "Hello", "ts": "2026-12-01"},
                        {"index": {"_index": "told-1", "_id": "1"}}, {"a": 1}],
                       params="?refresh=true")
        eq((st, b["errors"]), (200, False), "bulk auto-creates via %s: %s" % (label, b))
        st, b = n.req("GET", "/" + day)
        ix = b[day]
        eq((ix["settings"]["index"]["number_of_shards"], ix["settings"]["index"]["number_of_replicas"]),
           ("2", "0"), "priority 10 wins via " + label)
        eq(ix["mappings"]["properties"]["msg"], {"type": "keyword"}, "template mapping")
        eq(ix["aliases"], {"tlogs": {}}, "template alias")
        st, b = n.req("POST", "/tlogs/_search", {"query": {"term": {"msg": "Hello"}}})
        eq(b["hits"]["total"]["value"], 1, "keyword search through the template's alias")
        st, b = n.req("GET", "/told-1")
        eq((b["told-1"]["settings"]["index"]["number_of_shards"], b["told-1"]["aliases"]),
           ("3", {"tolds": {}}), "legacy: higher order wins, both merged via " + label)
        eq(b["told-1"]["settings"]["index"]["number_of_replicas"], "0", "lower order kept")
        # an explicit create: the request's own settings win
        st, b = n.req("PUT", "/tlogs-explicit", {"settings": {"number_of_shards": 1}})
        eq(st, 200, "explicit create")
        st, b = n.req("GET", "/tlogs-explicit")
        eq((b["tlogs-explicit"]["settings"]["index"]["number_of_shards"],
            b["tlogs-explicit"]["aliases"]), ("1", {"tlogs": {}}), "request over template")
    if True:
        # every cluster node created the auto-created index alike
        for x in NAMES:
            st, b = c[x].req("GET", "/tlogs-2026.12.01/_settings")
            eq(b["tlogs-2026.12.01"]["settings"]["index"]["number_of_shards"], "2",
               "same shards on " + x)


@test
def index_template_refusals():
    for label, n in (("solo", solo()), ("node-2", cluster()["node-2"])):
        error_is(n.req("PUT", "/_index_template/bad1", {"template": {}}), 400,
                 "action_request_validation_exception", "index patterns are missing")
        error_is(n.req("PUT", "/_index_template/bad2", {"index_patterns": ["x*"],
                                                        "composed_of": ["nope"]}), 400,
                 "invalid_index_template_exception", "specifies component templates [nope]")
        error_is(n.req("PUT", "/_index_template/bad3", {"index_patterns": ["tlogs-a*"],
                                                        "priority": 10}), 400,
                 "illegal_argument_exception", "same priority [10]")
        error_is(n.req("PUT", "/_index_template/bad4", {"index_patterns": ["y*"], "template": {
            "mappings": {"properties": {"f": {"type": "nosuchtype"}}}}}), 400,
            "mapper_parsing_exception")
        error_is(n.req("PUT", "/_index_template/bad5", {"index_patterns": ["y*"], "bogus": 1}),
                 400, "parsing_exception", "unknown field [bogus]")
        error_is(n.req("PUT", "/_index_template/bad6", {"index_patterns": ["z*"],
                                                        "data_stream": {}}), 400,
                 "illegal_argument_exception", "data streams")
        error_is(n.req("PUT", "/_index_template/tlogs?create=true", {"index_patterns": ["q*"]}),
                 400, "illegal_argument_exception", "already exists")
        error_is(n.req("DELETE", "/_component_template/tc-base"), 400,
                 "illegal_argument_exception", "still in use by index templates [tlogs]")
        error_is(n.req("GET", "/_index_template/nope"), 404, "resource_not_found_exception")
        error_is(n.req("DELETE", "/_index_template/nope"), 404, "resource_not_found_exception")
        eq(n.req("GET", "/_template/nope")[0], 404, "legacy GET missing")


@test
def index_template_delete_reaches_every_node():
    c = cluster()
    eq(c["node-1"].req("DELETE", "/_index_template/tlogs-low"), (200, {"acknowledged": True}),
       "delete")
    for x in NAMES:
        eq(c[x].req("GET", "/_index_template/tlogs-low")[0], 404, "gone on " + x)
    s = solo()
    eq(s.req("DELETE", "/_template/told-0")[0], 200, "legacy delete")
    s.restart()
    st, b = s.req("GET", "/_template/told-0")
    eq(st, 404, "deleted stays deleted after a restart")
    st, b = s.req("GET", "/_index_template/tlogs")
    eq((st, b["index_templates"][0]["name"]), (200, "tlogs"), "kept after a restart")


# ---- scroll on a cluster node ----

@test
def scroll_on_a_cluster():
    c = cluster()
    n = c["node-1"]
    eq(n.req("PUT", "/sc", {"settings": {"number_of_shards": 3, "number_of_replicas": 1}})[0],
       200, "create")
    lines = []
    for i in range(23):
        lines += [{"index": {"_index": "sc", "_id": str(i)}}, {"i": i}]
    eq(c["node-2"].bulk(lines, params="?refresh=true")[1]["errors"], False, "bulk")
    st, b = n.req("POST", "/sc/_search?scroll=1m", {"size": 10, "sort": ["i"]})
    eq(st, 200, "scroll start: %s" % b)
    sid, seen = b["_scroll_id"], [h["_source"]["i"] for h in b["hits"]["hits"]]
    eq(b["hits"]["total"]["value"], 23, "total")
    while True:
        st, b = n.req("POST", "/_search/scroll", {"scroll": "1m", "scroll_id": sid})
        eq(st, 200, "next page: %s" % b)
        if not b["hits"]["hits"]:
            break
        seen += [h["_source"]["i"] for h in b["hits"]["hits"]]
        eq(len(seen) <= 23, True, "no page repeats")
    eq(seen, list(range(23)), "every hit once, in order")
    st, b = n.req("DELETE", "/_search/scroll", {"scroll_id": sid})
    # one search context per shard copy, as ES counts them
    eq((st, b["num_freed"]), (200, 3), "cleared")
    error_is(n.req("POST", "/_search/scroll", {"scroll": "1m", "scroll_id": sid}), 404,
             "search_context_missing_exception")


# ---- field types ----

@test
def binary_field_type():
    for label, n in (("solo", solo()), ("node-3", cluster()["node-3"])):
        st, b = n.req("PUT", "/bin", {"mappings": {"properties": {"blob": {"type": "binary"},
                                                                  "k": {"type": "keyword"}}}})
        eq(st, 200, "create on %s: %s" % (label, b))
        st, b = n.req("GET", "/bin/_mapping")
        eq(b["bin"]["mappings"]["properties"]["blob"], {"type": "binary"}, "mapping shown as given")
        blob = "U29tZSBiaW5hcnkgYmxvYg=="
        eq(n.req("PUT", "/bin/_doc/1?refresh=true", {"blob": blob, "k": "a"})[0], 201, "index")
        for bad in ("not base64!", 5, "QQ=x", "Q"):
            error_is(n.req("PUT", "/bin/_doc/2", {"blob": bad}), 400, "mapper_parsing_exception",
                     "of type [binary]")
        st, b = n.req("POST", "/bin/_search", {"fields": ["blob"], "_source": False})
        eq(b["hits"]["hits"][0]["fields"], {"blob": [blob]}, "fields returns the base64 text")
        st, b = n.req("GET", "/bin/_doc/1")
        eq(b["_source"]["blob"], blob, "stored in _source")
        st, b = n.req("POST", "/bin/_search", {"query": {"term": {"blob": blob}}})
        eq(b["hits"]["total"]["value"], 0, "not searchable")
        error_is(n.req("POST", "/bin/_search", {"docvalue_fields": ["blob"]}), 400,
                 "illegal_argument_exception", "fielddata is unsupported on fields of type [binary]")
        error_is(n.req("PUT", "/bin2", {"mappings": {"properties": {"b": {"type": "binary",
                                                                         "index": True}}}}),
                 400, "mapper_parsing_exception", "unknown parameter [index]")
        eq(n.req("DELETE", "/bin")[0], 200, "cleanup")


# ---- hostile input to the new endpoints: a 4xx, never a crash ----

@test
def malformed_requests_get_4xx():
    n = solo()
    n.req("PUT", "/hx", {"aliases": {"hx-a": {}}})
    bodies = [
        ("POST", "/_aliases", {"actions": [{"add": {"index": 5, "alias": "x"}}]}),
        ("POST", "/_aliases", {"actions": [{"add": {"index": "hx", "alias": ["a", 3]}}]}),
        ("POST", "/_aliases", {"actions": [{"add": {"index": "hx"}}]}),
        ("POST", "/_aliases", {"actions": [{"add": {"index": "hx", "alias": "x", "filter": 3}}]}),
        ("POST", "/_aliases", {"actions": [{"add": {"index": "hx", "alias": "x", "routing": []}}]}),
        ("POST", "/_aliases", {"actions": [{"add": {"index": "hx", "alias": "x",
                                                    "is_write_index": "yes"}}]}),
        ("POST", "/_aliases", {"actions": [{"add": {"index": "hx", "alias": "x"}, "remove": {}}]}),
        ("POST", "/_aliases", {"actions": [5]}),
        ("POST", "/_aliases", {"actions": {"add": {}}}),
        ("POST", "/_aliases", [1, 2]),
        ("POST", "/_aliases", {"actions": [{"remove_index": {"index": "hx", "alias": "q"}}]}),
        ("PUT", "/hx/_alias/y", [1]),
        ("PUT", "/hx/_alias/y", {"index": "other"}),
        ("PUT", "/hx/_alias/y", {"bogus": 1}),
        ("PUT", "/hz", {"aliases": {"a": 5}}),
        ("PUT", "/hz", {"aliases": [1]}),
        ("PUT", "/hz", {"aliases": {"_bad": {}}}),
        ("PUT", "/tlogs-hz", [1]),
        ("PUT", "/tlogs-hz", {"settings": {"number_of_shards": "x"}}),
        ("PUT", "/_index_template/t1", {"index_patterns": [1]}),
        ("PUT", "/_index_template/t1", {"index_patterns": "x*", "composed_of": "c"}),
        ("PUT", "/_index_template/t1", {"index_patterns": "x*", "priority": -1}),
        ("PUT", "/_index_template/t1", {"index_patterns": "x*", "template": {"settings": 1}}),
        ("PUT", "/_index_template/t1", {"index_patterns": "x*", "template": {"what": {}}}),
        ("PUT", "/_index_template/t1", [1]),
        ("PUT", "/_component_template/c1", {"template": 5}),
        ("PUT", "/_component_template/c1", {}),
        ("PUT", "/_template/l1", {"order": "x", "index_patterns": ["a*"]}),
        ("PUT", "/_template/l1", {"settings": []}),
        ("PUT", "/_template/l1", {}),
        ("POST", "/hx/_search", {"fields": [{"field": 5}]}),
        ("POST", "/hx/_search", {"fields": [{"format": "x"}]}),
        ("POST", "/hx/_search", {"fields": [["a"]]}),
        ("POST", "/hx/_search", {"fields": [{"field": "a", "include_unmapped": 3}]}),
        ("POST", "/hx/_search", {"docvalue_fields": {"a": 1}}),
        ("POST", "/hx/_search", {"docvalue_fields": [""]}),
        ("POST", "/hx/_search", {"stored_fields": 5}),
        ("POST", "/hx/_search", {"stored_fields": [5]}),
        ("POST", "/hx/_search", {"stored_fields": ["_none_", "a"]}),
        ("POST", "/hx/_search", {"script_fields": []}),
        ("POST", "/hx/_search", {"runtime_mappings": "x"}),
    ]
    for method, path, body in bodies:
        st, b = n.req(method, path, body)
        assert 400 <= st < 500, (method, path, body, st, b)
        eq(isinstance(b, dict) and "error" in b and b.get("status") == st, True,
           "ES-shaped error for %s %s %s: %s" % (method, path, body, b))
    st, b = n.req("GET", "/_alias/hx-a")
    eq((st, list(b)), (200, ["hx"]), "nothing changed by the refused requests")
    eq(n.req("GET", "/_index_template/t1")[0], 404, "no template t1")
    eq(n.req("HEAD", "/hz")[0], 404, "no index hz")
    eq(n.req("HEAD", "/tlogs-hz")[0], 404, "no index tlogs-hz (a template matches it)")
    eq(n.req("GET", "/")[0], 200, "still up")


# ---- index settings ES users set, and index blocks ----

@test
def index_settings_accepted_and_blocks():
    for label, n in (("solo", solo()), ("cluster", cluster()["node-1"])):
        nodes = [n] if label == "solo" else list(cluster().values())
        body = {"settings": {"number_of_shards": 2, "number_of_replicas": 0,
                             "index": {"codec": "best_compression",
                                       "mapping": {"total_fields": {"limit": 5000},
                                                   "depth": {"limit": 20}},
                                       "max_docvalue_fields_search": 200,
                                       "query.default_field": ["a", "b"],
                                       "routing.allocation.include._tier_preference":
                                           "data_content",
                                       "lifecycle": {"name": "logs"},
                                       "hidden": False, "translog.durability": "async",
                                       "refresh_interval": "-1"}}}
        st, b = n.req("PUT", "/st-acc", body)
        eq(st, 200, label + " create with accepted settings: %s" % b)
        for m in nodes:
            st, b = m.req("GET", "/st-acc/_settings")
            ix = b["st-acc"]["settings"]["index"]
            eq((ix["codec"], ix["mapping"]["total_fields"]["limit"],
                ix["max_docvalue_fields_search"], ix["query"]["default_field"],
                ix["lifecycle"]["name"], ix["hidden"], ix["refresh_interval"]),
               ("best_compression", "5000", "200", ["a", "b"], "logs", "false", "-1"),
               label + " settings kept and shown")
            st, b = m.req("GET", "/st-acc/_settings?flat_settings=true")
            eq(st, 200, label + " flat settings")
        error_is(n.req("PUT", "/st-bad", {"settings": {"index.mapping.total_fields.limit": "x"}}),
                 400, "illegal_argument_exception", "an integer from 1 to 10000")
        error_is(n.req("PUT", "/st-bad", {"settings": {"index.max_terms_count": -1}}),
                 400, "illegal_argument_exception", "a non-negative integer expected")
        # total_fields.limit is honoured: creates, mapping changes, dynamic fields
        error_is(n.req("PUT", "/st-lim", {"settings": {"index.mapping.total_fields.limit": 2},
                                          "mappings": {"properties": {
                                              "a": {"type": "long"}, "b": {"type": "long"},
                                              "c": {"type": "long"}}}}),
                 400, "illegal_argument_exception", "Limit of total fields [2] has been exceeded")
        st, b = n.req("PUT", "/st-lim", {"settings": {"number_of_shards": 1,
                                                      "number_of_replicas": 0,
                                                      "index.mapping.total_fields.limit": 2}})
        eq(st, 200, label + " create with a limit")
        st, b = n.req("PUT", "/st-lim/_doc/1", {"a": 1, "b": 2, "c": 3})
        error_is((st, b), 400, "illegal_argument_exception", "Limit of total fields [2]")
        error_is(n.req("PUT", "/st-lim/_mapping", {"properties": {"x": {"type": "long"},
                                                                  "y": {"type": "long"},
                                                                  "z": {"type": "long"}}}),
                 400, "illegal_argument_exception", "Limit of total fields [2]")
        st, b = n.req("PUT", "/st-lim/_settings", {"index.mapping.total_fields.limit": 5000})
        eq(st, 200, label + " raise the limit")
        st, b = n.req("PUT", "/st-lim/_doc/1", {"a": 1, "b": 2, "c": 3})
        eq(st, 201, label + " fits now: %s" % b)
        st, b = n.req("GET", "/st-lim/_settings")
        eq(b["st-lim"]["settings"]["index"]["mapping"]["total_fields"]["limit"], "5000",
           label + " limit shown")
        n.req("DELETE", "/st-lim")
        error_is(n.req("PUT", "/st-bad", {"settings": {"index.colour": "red"}}), 400,
                 "illegal_argument_exception", "unknown setting [index.colour]")
        st, _ = n.req("HEAD", "/st-bad")
        eq(st, 404, label + " a refused create makes nothing")
        st, b = n.req("PUT", "/st-acc/_settings", {"index.codec": None})
        eq(st, 200, label + " reset to the default")
        st, b = n.req("GET", "/st-acc/_settings")
        eq("codec" in b["st-acc"]["settings"]["index"], False, label + " reset gone")
        # blocks
        st, b = n.req("PUT", "/st-acc/_doc/1?refresh=true", {"a": 1})
        eq(st, 201, label + " write before a block")
        st, b = n.req("PUT", "/st-acc/_settings", {"index.blocks.write": True})
        eq(st, 200, label + " set blocks.write: %s" % b)
        for m in nodes:
            error_is(m.req("PUT", "/st-acc/_doc/2", {"a": 2}), 403, "cluster_block_exception",
                     "index [st-acc] blocked by: [FORBIDDEN/8/index write (api)];")
            error_is(m.req("DELETE", "/st-acc/_doc/1"), 403, "cluster_block_exception")
            st, b = m.bulk([{"index": {"_index": "st-acc", "_id": "3"}}, {"a": 3}])
            it = b["items"][0]["index"]
            eq((st, it["status"], it["error"]["type"]), (200, 403, "cluster_block_exception"),
               label + " bulk item blocked")
            st, b = m.req("POST", "/st-acc/_search", {"query": {"match_all": {}}})
            eq((st, b["hits"]["total"]["value"]), (200, 1), label + " reads go on")
        st, b = n.req("POST", "/st-acc/_delete_by_query", {"query": {"match_all": {}}})
        eq((st, b["deleted"], len(b["failures"])), (200, 0, 1), label + " by-query blocked")
        st, b = n.req("PUT", "/st-acc/_settings", {"index.blocks.write": False,
                                                   "index.blocks.read_only": True})
        eq(st, 200, label + " swap to read_only: %s" % b)
        error_is(n.req("PUT", "/st-acc/_mapping", {"properties": {"z": {"type": "keyword"}}}),
                 403, "cluster_block_exception", "FORBIDDEN/5/index read-only (api)")
        error_is(n.req("PUT", "/st-acc/_settings", {"index.codec": "default"}), 403,
                 "cluster_block_exception")
        error_is(n.req("PUT", "/st-acc/_doc/2", {"a": 2}), 403, "cluster_block_exception")
        st, b = n.req("PUT", "/st-acc/_settings", {"index": {"blocks": {"read_only": False,
                                                                        "read": True}}})
        eq(st, 200, label + " blocks may change on a read-only index: %s" % b)
        for m in nodes:
            error_is(m.req("POST", "/st-acc/_search", {}), 403, "cluster_block_exception",
                     "FORBIDDEN/7/index read (api)")
            error_is(m.req("GET", "/st-acc/_doc/1"), 403, "cluster_block_exception")
            error_is(m.req("POST", "/st-acc/_count", {}), 403, "cluster_block_exception")
        st, b = n.req("PUT", "/st-acc/_doc/2?refresh=true", {"a": 2})
        eq(st, 201, label + " writes go on under a read block")
        st, b = n.req("PUT", "/st-acc/_settings", {"index.blocks.read": None,
                                                   "index.blocks.read_only_allow_delete": True})
        eq(st, 200, label + " read_only_allow_delete")
        error_is(n.req("PUT", "/st-acc/_doc/4", {"a": 4}), 403, "cluster_block_exception",
                 "read-only / allow delete")
        st, b = n.req("DELETE", "/st-acc/_doc/2?refresh=true")
        eq(st, 200, label + " deletes allowed: %s" % b)
        st, b = n.req("GET", "/st-acc/_settings")
        eq(b["st-acc"]["settings"]["index"]["blocks"], {"read_only_allow_delete": "true"},
           label + " blocks shown")
        n.req("DELETE", "/st-acc")


@test
def date_math_index_names():
    import datetime
    from urllib.parse import quote

    def days(off_h=0):
        # the names for now and a second later (a run may cross midnight)
        out = set()
        for _ in range(2):
            t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=off_h)
            out.add(t)
        return out

    for label, n in (("solo", solo()), ("cluster", cluster()["node-1"])):
        before = {t.strftime("dm-%Y.%m.%d") for t in days()}
        st, b = n.req("PUT", "/" + quote("<dm-{now/d}>", safe=""),
                      {"settings": {"number_of_shards": 1, "number_of_replicas": 0}})
        eq(st, 200, label + " create by date math: %s" % b)
        name = b["index"]
        eq(name in before | {t.strftime("dm-%Y.%m.%d") for t in days()}, True,
           label + " resolved name %s" % name)
        st, b = n.bulk([{"index": {"_index": "<dm-{now/d}>", "_id": "1"}}, {"a": 1}],
                       params="?refresh=true")
        eq(b["items"][0]["index"]["_index"], name, label + " bulk _index by date math")
        st, b = n.req("GET", "/%s,%s/_search" % (quote("<dm-{now/d}>", safe=""), name))
        eq((st, b["hits"]["total"]["value"]), (200, 1), label + " search through a list")
        st, b = n.req("PUT", "/" + quote("<dm-{now/M{yyyy.MM|+12:00}}-x>", safe=""), {})
        want = {t.strftime("dm-%Y.%m-x") for t in days(12)}
        eq((st, b.get("index") in want), (200, True), label + " format and zone: %s" % b)
        st, b = n.req("PUT", "/" + quote("<dm-\\{lit\\}-{now/y{yyyy}}>", safe=""), {})
        eq((st, b.get("index")), (200, "dm-{lit}-%d" % datetime.datetime.utcnow().year),
           label + " escaped braces: %s" % b)
        for bad_name in ("<dm-{now/d>", "<dm-{yesterday}>", "<dm-{now/d{yyyy|Mars/Base}}>"):
            error_is(n.req("PUT", "/" + quote(bad_name, safe=""), {}), 400, "parse_exception",
                     "invalid dynamic name expression")
        for ix in list(want) + [name, "dm-{lit}-%d" % datetime.datetime.utcnow().year]:
            n.req("DELETE", "/" + quote(ix, safe=""))


@test
def dynamic_templates():
    tpl = [{"message_field": {"path_match": "message", "match_mapping_type": "string",
                              "mapping": {"type": "text", "norms": False}}},
           {"ints": {"match_mapping_type": "long", "match": "n_*",
                     "mapping": {"type": "integer"}}},
           {"ips": {"match_pattern": "regex", "match": "ip_[0-9]+",
                    "mapping": {"type": "ip"}}},
           {"raw_obj": {"match_mapping_type": "object", "path_match": "raw",
                        "mapping": {"type": "object", "enabled": False}}},
           {"tags": {"path_match": "meta.*", "path_unmatch": "meta.free",
                     "mapping": {"type": "keyword", "ignore_above": 10}}},
           {"strings": {"match_mapping_type": "string", "unmatch": "free*",
                        "mapping": {"type": "{dynamic_type}", "analyzer": "simple",
                                    "fields": {"raw": {"type": "keyword"}}}}}]
    for label, n in (("solo", solo()), ("cluster", cluster()["node-1"])):
        st, b = n.req("PUT", "/dt-x", {"settings": {"number_of_shards": 2,
                                                    "number_of_replicas": 0},
                                       "mappings": {"dynamic_templates": tpl}})
        eq(st, 200, label + " create: %s" % b)
        st, b = n.req("PUT", "/dt-x/_doc/1?refresh=true",
                      {"message": "Hello World", "n_count": 5, "other": 7, "ip_1": "10.0.0.1",
                       "raw": {"anything": [1, "x"]}, "meta": {"env": "prod", "free": "f"},
                       "title": "Big Red", "free_text": "zz", "price": 2.5})
        eq(st, 201, label + " index: %s" % b)
        st, b = n.req("GET", "/dt-x/_mapping")
        m = b["dt-x"]["mappings"]
        eq(m["dynamic_templates"], tpl, label + " templates shown as given")
        p = m["properties"]
        eq(p["message"], {"type": "text"}, label + " path_match + type (norms is accepted, not shown)")
        eq(p["n_count"], {"type": "integer"}, label + " long -> integer")
        eq(p["other"]["type"], "long", label + " unmatched long keeps the default")
        eq(p["ip_1"], {"type": "ip"}, label + " regex match")
        eq((p["raw"].get("enabled"), "properties" in p["raw"]), (False, False),
           label + " object template: disabled, nothing mapped under it")
        eq(p["meta"]["properties"]["env"], {"type": "keyword", "ignore_above": 10},
           label + " path_match under an object")
        eq(p["meta"]["properties"]["free"]["type"], "text", label + " path_unmatch")
        eq(p["title"], {"type": "text", "analyzer": "simple",
                        "fields": {"raw": {"type": "keyword"}}}, label + " {dynamic_type}")
        eq(p["free_text"]["fields"]["keyword"]["type"], "keyword", label + " unmatch: default")
        eq(p["price"]["type"], "float", label + " double default")
        st, b = n.req("POST", "/dt-x/_search", {"query": {"term": {"ip_1": "10.0.0.0/8"}}})
        eq(b["hits"]["total"]["value"], 1, label + " the ip field works")
        st, b = n.req("POST", "/dt-x/_search", {"query": {"term": {"title.raw": "Big Red"}}})
        eq(b["hits"]["total"]["value"], 1, label + " the template's sub-field works")
        # merged by name on a mapping update
        st, b = n.req("PUT", "/dt-x/_mapping", {"dynamic_templates": [
            {"ints": {"match": "n_*", "match_mapping_type": "long",
                      "mapping": {"type": "short"}}},
            {"extra": {"match": "e_*", "mapping": {"type": "keyword"}}}]})
        eq(st, 200, label + " put mapping: %s" % b)
        st, b = n.req("GET", "/dt-x/_mapping")
        names = [list(t)[0] for t in b["dt-x"]["mappings"]["dynamic_templates"]]
        eq(names, ["message_field", "ints", "ips", "raw_obj", "tags", "strings", "extra"],
           label + " merged by name")
        st, b = n.req("PUT", "/dt-x/_doc/2?refresh=true", {"n_new": 1, "e_k": 3})
        st, b = n.req("GET", "/dt-x/_mapping")
        p = b["dt-x"]["mappings"]["properties"]
        eq((p["n_new"]["type"], p["e_k"]["type"]), ("short", "keyword"), label + " new templates")
        for bad, why in (([{"a": {"match": "*"}}], "must have either mapping"),
                         ([{"a": {"match": "*", "mapping": {"type": "bogus"}}}], "bogus"),
                         ([{"a": {"match_mapping_type": "int", "mapping": {}}}],
                          "No field type matched on [int]"),
                         ([{"a": {"colour": 1, "mapping": {}}}], "Illegal dynamic template"),
                         ({"a": 1}, "An array of named objects is expected")):
            st, b = n.req("PUT", "/dt-bad", {"mappings": {"dynamic_templates": bad}})
            error_is((st, b), 400, "mapper_parsing_exception", why)
        n.req("DELETE", "/dt-x")


@test
def open_close_and_index_options():
    for label, n in (("solo", solo()), ("cluster", cluster()["node-1"])):
        nodes = [n] if label == "solo" else list(cluster().values())
        for name in ("oc-a", "oc-b"):
            st, b = n.req("PUT", "/" + name, {"settings": {"number_of_shards": 2,
                                                           "number_of_replicas": 0}})
            eq(st, 200, label + " create " + name)
            n.req("PUT", "/%s/_doc/1?refresh=true" % name, {"t": "x"})
        st, b = n.req("POST", "/oc-a/_close")
        eq((st, b), (200, {"acknowledged": True, "shards_acknowledged": True,
                           "indices": {"oc-a": {"closed": True}}}), label + " close")
        for m in nodes:
            error_is(m.req("POST", "/oc-a/_search", {}), 400, "index_closed_exception", "closed")
            error_is(m.req("GET", "/oc-a/_doc/1"), 400, "index_closed_exception")
            error_is(m.req("PUT", "/oc-a/_doc/2", {"t": "y"}), 400, "index_closed_exception")
            error_is(m.req("PUT", "/oc-a/_mapping", {"properties": {"z": {"type": "long"}}}),
                     400, "index_closed_exception")
            st, b = m.req("POST", "/oc-*/_search", {})
            eq((st, b["hits"]["total"]["value"]), (200, 1), label + " wildcards skip closed")
            error_is(m.req("POST", "/oc-*/_search?expand_wildcards=all", {}), 400,
                     "index_closed_exception")
            st, b = m.req("GET", "/_cat/indices/oc-*?h=index,status&s=index")
            eq((st, b.split()), (200, ["oc-a", "close", "oc-b", "open"]), label + " cat status")
            st, b = m.req("GET", "/oc-a/_settings")
            eq(b["oc-a"]["settings"]["index"]["verified_before_close"], "true",
               label + " settings of a closed index")
        st, b = n.req("PUT", "/oc-a/_settings", {"index.codec": "best_compression"})
        eq(st, 200, label + " settings change on a closed index: %s" % b)
        st, b = n.bulk([{"index": {"_index": "oc-a", "_id": "3"}}, {"t": 1}])
        eq(b["items"][0]["index"]["error"]["type"], "index_closed_exception", label + " bulk")
        st, b = n.req("POST", "/oc-*/_open")
        eq((st, b), (200, {"acknowledged": True, "shards_acknowledged": True}), label + " open")
        for m in nodes:
            st, b = m.req("POST", "/oc-a/_search", {})
            eq((st, b["hits"]["total"]["value"]), (200, 1), label + " open again, data kept")
        # allow_no_indices and expand_wildcards values
        st, b = n.req("POST", "/nothing-*/_search", {})
        eq((st, b["hits"]["total"]["value"]), (200, 0), label + " no indices: empty")
        error_is(n.req("POST", "/nothing-*/_search?allow_no_indices=false", {}), 404,
                 "index_not_found_exception")
        error_is(n.req("POST", "/oc-*/_search?expand_wildcards=weird", {}), 400,
                 "illegal_argument_exception")
        st, b = n.req("POST", "/oc-*/_search?expand_wildcards=none", {})
        eq((st, b["hits"]["total"]["value"]), (200, 0), label + " expand none")
        for name in ("oc-a", "oc-b"):
            n.req("DELETE", "/" + name)


@test
def explain_and_validate():
    for label, n in (("solo", solo()), ("cluster", cluster()["node-1"])):
        n.req("PUT", "/ex-a", {"settings": {"number_of_shards": 3, "number_of_replicas": 0}})
        n.bulk([{"index": {"_index": "ex-a", "_id": "1"}}, {"t": "quick brown fox"},
                {"index": {"_index": "ex-a", "_id": "2"}}, {"t": "lazy dog"}],
               params="?refresh=true")
        q = {"query": {"match": {"t": "brown fox"}}}
        st, b = n.req("POST", "/ex-a/_search", dict(q, explain=True))
        score = b["hits"]["hits"][0]["_score"]
        st, b = n.req("POST", "/ex-a/_explain/1", q)
        eq((st, b["matched"], b["_id"], b["_index"]), (200, True, "1", "ex-a"), label + " match")
        eq(abs(b["explanation"]["value"] - score) < 1e-6, True,
           label + " the explanation's value is the hit's score")
        st, b = n.req("POST", "/ex-a/_explain/2", q)
        eq((st, b["matched"], b["explanation"]["value"]), (200, False, 0.0), label + " no match")
        st, b = n.req("GET", "/ex-a/_explain/1?q=t:dog")
        eq((st, b["matched"]), (200, False), label + " q= form")
        st, b = n.req("GET", "/ex-a/_explain/2?q=t:dog")
        eq((st, b["matched"]), (200, True), label + " q= form matching")
        error_is(n.req("POST", "/ex-a/_explain/1", {}), 400, "action_request_validation_exception")
        error_is(n.req("POST", "/ex-a/_explain/1", {"query": {"bogus": {}}}), 400,
                 "parsing_exception")
        st, b = n.req("POST", "/ex-a/_validate/query", q)
        eq((st, b["valid"]), (200, True), label + " valid")
        st, b = n.req("POST", "/ex-a/_validate/query", {"query": {"bogus": {}}})
        eq((st, b["valid"], "error" in b), (200, False, False), label + " invalid")
        st, b = n.req("POST", "/ex-a/_validate/query?explain=true", {"query": {"bogus": {}}})
        eq((st, b["valid"], "bogus" in b["explanations"][0]["error"]), (200, False, True),
           label + " invalid, explained")
        st, b = n.req("POST", "/_validate/query?explain=true", {"query": {"term": {"t": "x"}}})
        eq((st, b["valid"], len(b["explanations"]) >= 1), (200, True, True), label + " explain")
        n.req("DELETE", "/ex-a")


def teardown():
    rc = 0
    if SOLO:
        rc = SOLO.stop() or rc
    for n in CLUSTER.values():
        rc = n.stop() or rc
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=400, teardown=teardown)
