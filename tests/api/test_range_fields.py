"""Range field types integer_range, long_range, float_range, double_range,
date_range and ip_range (issue 26), on a solo node and a 3-node static
cluster: mappings, document errors, and queries (range with each
relation, term, terms, exists) checked against a Python model of
Elasticsearch 7.10's rules (exclusive bounds stored as the next value
in, open bounds as the type's extremes, any range of a document
matching)."""
import ipaddress
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, error_is, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-range-test-")
NAMES = ["node-1", "node-2", "node-3"]
SOLO = None
CLUSTER = {}


def solo():
    global SOLO
    if SOLO is None:
        SOLO = Node()
    return SOLO


def cluster():
    if not CLUSTER:
        cfile = os.path.join(TMP, "cluster.json")
        ports = cluster_file(cfile, [(n, None) for n in NAMES])
        for n in NAMES:
            d = os.path.join(TMP, n)
            os.makedirs(d, exist_ok=True)
            CLUSTER[n] = ClusterNode(cfile, n, ports[n][0], data=d)
        for n in NAMES:
            st, b = CLUSTER[n].req("GET", "/_cluster/health?wait_for_nodes=3&timeout=60s",
                                   timeout=80)
            eq((st, b.get("number_of_nodes")), (200, 3), "3 nodes seen by " + n)
    return CLUSTER


def targets():
    """(label, node to write through, nodes to ask)."""
    c = cluster()
    return [("solo", solo(), [solo()]), ("cluster", c["node-1"], list(c.values()))]


def make_index(n, name, props, docs, shards=3):
    n.req("DELETE", "/" + name)
    st, b = n.req("PUT", "/" + name, {
        "settings": {"number_of_shards": shards, "number_of_replicas": 0},
        "mappings": {"properties": props}})
    eq(st, 200, "create %s: %s" % (name, b))
    lines = []
    for i, d in docs:
        lines += [{"index": {"_index": name, "_id": str(i)}}, d]
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk into %s: %s" % (name, b))


def ids(n, index, query):
    st, b = n.req("POST", "/%s/_search" % index, {"query": query, "size": 1000})
    eq(st, 200, "search %s %s: %s" % (index, query, b))
    return sorted((h["_id"] for h in b["hits"]["hits"]), key=int)


RANGE_TYPES = ["integer_range", "long_range", "float_range", "double_range", "date_range",
               "ip_range"]


# ---- mappings and documents ----

@test
def mappings():
    n = solo()
    props = {"i": {"type": "integer_range", "coerce": False, "store": True},
             "l": {"type": "long_range", "index": False},
             "f": {"type": "float_range", "doc_values": False},
             "d": {"type": "double_range"},
             "t": {"type": "date_range", "format": "yyyy-MM-dd"},
             "p": {"type": "ip_range"}}
    n.req("DELETE", "/rmap")
    st, b = n.req("PUT", "/rmap", {"mappings": {"properties": props}})
    eq(st, 200, "range mapping: %s" % b)
    st, b = n.req("GET", "/rmap/_mapping")
    eq(b["rmap"]["mappings"]["properties"], props, "mapping as given")
    n.req("DELETE", "/rmap")
    bad = [({"x": {"type": "long_range", "format": "yyyy"}}, "unknown parameter [format]"),
           ({"x": {"type": "ip_range", "null_value": "1.2.3.4/8"}},
            "unknown parameter [null_value]"),
           ({"x": {"type": "long_range", "ignore_malformed": True}},
            "unknown parameter [ignore_malformed]"),
           ({"x": {"type": "date_range", "format": "no_such_format"}}, "Invalid format"),
           ({"x": {"type": "integer_range", "coerce": "maybe"}}, "coerce")]
    for props, reason in bad:
        r = n.req("PUT", "/rbad", {"mappings": {"properties": props}})
        error_is(r, 400, "mapper_parsing_exception", reason)
        eq(n.req("HEAD", "/rbad")[0], 404, "no index left behind by %s" % props)


@test
def documents():
    n = solo()
    n.req("DELETE", "/rdoc")
    st, _ = n.req("PUT", "/rdoc", {"mappings": {"properties": {
        "i": {"type": "integer_range"}, "ic": {"type": "integer_range", "coerce": False},
        "f": {"type": "float_range"}, "t": {"type": "date_range", "format": "yyyy-MM-dd"},
        "p": {"type": "ip_range"}}}})
    eq(st, 200, "create")
    good = [{"i": {"gte": 1, "lte": 5}}, {"i": {"gt": 1}}, {"i": {}},
            {"i": [{"gte": 1, "lt": 3}, {"gte": 10, "lte": 10}]}, {"i": {"gte": "2.7"}},
            {"i": None}, {"i": {"gte": None, "lte": 3}}, {"f": {"gte": 0.5, "lt": 1e30}},
            {"t": {"gte": "2020-01-01", "lte": "2020-12-31"}}, {"p": "10.0.0.0/8"},
            {"p": {"gte": "::1", "lt": "::ffff"}}, {"ic": {"gte": 1}}]
    for k, d in enumerate(good):
        st, b = n.req("PUT", "/rdoc/_doc/%d?refresh=true" % k, d)
        eq(st, 201, "indexed %s: %s" % (d, b))
        st, b = n.req("GET", "/rdoc/_doc/%d" % k)
        eq(b["_source"], d, "_source as given")
    bad = [{"i": 5}, {"i": "1-2"}, {"i": {"gte": 1, "foo": 2}}, {"i": {"gte": 5, "lte": 1}},
           {"i": {"gt": 1, "lt": 2}}, {"i": {"gte": 2147483648}}, {"i": {"gte": "x"}},
           {"ic": {"gte": 1.5}}, {"ic": {"gte": "1"}}, {"f": {"lte": "abc"}},
           {"t": {"gte": "2020/01/01"}}, {"p": "10.0.0.1"}, {"p": "10.0.0.0/33"},
           {"p": {"gte": "1.2.3"}}, {"p": 7}, {"i": [{"gte": 1}, 3]}]
    for d in bad:
        r = n.req("PUT", "/rdoc/_doc/bad", d)
        error_is(r, 400, "mapper_parsing_exception", "failed to parse field")
    eq(n.req("GET", "/rdoc/_doc/bad")[0], 404, "nothing indexed")
    n.req("DELETE", "/rdoc")


def teardown():
    rc = 0
    if SOLO:
        rc = SOLO.stop() or rc
    for n in CLUSTER.values():
        rc = n.stop() or rc
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
