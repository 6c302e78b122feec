"""The flattened field type on a solo node and a 3-node static cluster:
every leaf of the object is a keyword of the root field and of its key
("labels.release"); term, terms, prefix, range (keyword order), exists,
match, query_string and simple_query_string on both, terms aggregations
and sort on keys, all against a Python model of random documents;
depth_limit, ignore_above, null_value, index/doc_values; _source kept as
sent; _mapping and _field_caps; the mapping and document errors."""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-flattened-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown

RELEASES = ["v1.0", "v1.2", "v1.10", "v2.0", "beta", "Alpha"]
PRIOS = ["urgent", "low", "high", "critical"]  # critical: over ignore_above


def make_docs(seed, count):
    rnd = random.Random(seed)
    docs = []
    for i in range(count):
        labels = {}
        if rnd.random() < 0.8:
            r = rnd.sample(RELEASES, rnd.randint(1, 2))
            labels["release"] = r[0] if len(r) == 1 else r
        if rnd.random() < 0.6:
            labels["priority"] = rnd.choice(PRIOS)
        if rnd.random() < 0.4:
            labels["team"] = {"name": rnd.choice(["core", "ui", "ops"]),
                              "size": rnd.randint(1, 3)}
        if rnd.random() < 0.15:
            labels["priority"] = None  # null_value
        d = {"n": i}
        if labels or rnd.random() < 0.5:
            d["labels"] = labels
        docs.append(d)
    return docs


DOCS = make_docs(11, 50)
MAPPING = {"properties": {
    "labels": {"type": "flattened", "null_value": "none", "ignore_above": 6,
               "depth_limit": 2, "similarity": "BM25"},
    "n": {"type": "integer"}}}
_made = set()


def targets():
    c = cluster()
    return [("solo", solo(), [solo()]), ("cluster", c["node-1"], list(c.values()))]


def make_index(node, name="fl"):
    if (id(node), name) in _made:
        return
    st, b = node.req("PUT", "/" + name, {
        "settings": {"number_of_shards": 3, "number_of_replicas": 0}, "mappings": MAPPING})
    eq(st, 200, "create: %s" % b)
    lines = []
    for i, d in enumerate(DOCS):
        lines += [{"index": {"_index": name, "_id": str(i)}}, d]
    st, b = node.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk: %s" % b)
    _made.add((id(node), name))


def leaves(d):
    """(key, value) pairs as the model indexes them: values are text, nulls
    become null_value, values over ignore_above (6) are dropped."""
    out = []

    def walk(v, key):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, key + "." + k if key else k)
        elif isinstance(v, list):
            for x in v:
                walk(x, key)
        else:
            s = "none" if v is None else str(v)
            if len(s) <= 6:
                out.append((key, s))

    walk(d.get("labels"), "")
    return out


def values(d, key=None):
    return {v for k, v in leaves(d) if key is None or k == key}


def ids_where(pred):
    return sorted(str(i) for i, d in enumerate(DOCS) if pred(d))


def search_ids(node, body):
    body = dict(body)
    body.setdefault("size", 100)
    st, b = node.req("POST", "/fl/_search", body)
    eq(st, 200, "search %s: %s" % (body, b))
    eq(b["hits"]["total"]["value"], len(b["hits"]["hits"]), "total vs hits")
    return sorted(h["_id"] for h in b["hits"]["hits"])


@test
def flattened_queries_match_the_model():
    cases = [
        ({"term": {"labels": "urgent"}}, lambda d: "urgent" in values(d)),
        ({"term": {"labels": "core"}}, lambda d: "core" in values(d)),
        ({"term": {"labels.release": "v1.2"}}, lambda d: "v1.2" in values(d, "release")),
        ({"term": {"labels.team.name": "ui"}}, lambda d: "ui" in values(d, "team.name")),
        ({"term": {"labels.team.size": "2"}}, lambda d: "2" in values(d, "team.size")),
        ({"term": {"labels.priority": "none"}}, lambda d: "none" in values(d, "priority")),
        ({"term": {"labels.priority": "critical"}}, lambda d: False),
        ({"exists": {"field": "labels.priority"}}, lambda d: bool(values(d, "priority"))),
        ({"terms": {"labels.release": ["v2.0", "beta"]}},
         lambda d: bool(values(d, "release") & {"v2.0", "beta"})),
        ({"terms": {"labels": ["low", "ops"]}}, lambda d: bool(values(d) & {"low", "ops"})),
        ({"prefix": {"labels.release": "v1"}},
         lambda d: any(v.startswith("v1") for v in values(d, "release"))),
        ({"prefix": {"labels": "u"}}, lambda d: any(v.startswith("u") for v in values(d))),
        ({"wildcard": {"labels.release": "v*0"}},
         lambda d: any(v.startswith("v") and v.endswith("0") for v in values(d, "release"))),
        ({"regexp": {"labels.team.name": "c.*|o.s"}},
         lambda d: bool(values(d, "team.name") & {"core", "ops"})),
        ({"range": {"labels.release": {"gte": "v1.10", "lt": "v2"}}},
         lambda d: any("v1.10" <= v < "v2" for v in values(d, "release"))),
        ({"range": {"labels.release": {"gt": "beta"}}},
         lambda d: any(v > "beta" for v in values(d, "release"))),
        ({"range": {"labels": {"lte": "Alpha"}}}, lambda d: any(v <= "Alpha" for v in values(d))),
        ({"exists": {"field": "labels"}}, lambda d: bool(leaves(d))),
        ({"exists": {"field": "labels.team.name"}}, lambda d: bool(values(d, "team.name"))),
        ({"exists": {"field": "labels.nokey"}}, lambda d: False),
        ({"match": {"labels.release": "v1.0"}}, lambda d: "v1.0" in values(d, "release")),
        ({"match": {"labels.release": "alpha"}}, lambda d: "alpha" in values(d, "release")),
        ({"match": {"labels": "Alpha"}}, lambda d: "Alpha" in values(d)),
        ({"query_string": {"query": "labels.release:v1* AND labels.priority:high"}},
         lambda d: any(v.startswith("v1") for v in values(d, "release")) and
         "high" in values(d, "priority")),
        ({"query_string": {"query": "labels.team.name:(core OR ops)"}},
         lambda d: bool(values(d, "team.name") & {"core", "ops"})),
        ({"simple_query_string": {"query": "beta", "fields": ["labels.release"]}},
         lambda d: "beta" in values(d, "release")),
        ({"bool": {"must": [{"term": {"labels": "high"}}],
                   "must_not": [{"term": {"labels.priority": "high"}}]}},
         lambda d: "high" in values(d) and "high" not in values(d, "priority")),
    ]
    nonempty = 0
    for label, w, nodes in targets():
        make_index(w)
        for q, pred in cases:
            want = ids_where(pred)
            nonempty += bool(want)
            for n in nodes:
                eq(search_ids(n, {"query": q}), want, "%s %s" % (label, q))
    assert nonempty >= 30, "the model matches something for most queries (%d)" % nonempty


@test
def flattened_aggs_sort_and_source():
    for label, w, nodes in targets():
        make_index(w)
        n = nodes[-1]
        st, b = n.req("POST", "/fl/_search", {"size": 0, "aggs": {
            "r": {"terms": {"field": "labels.release", "size": 20}},
            "all": {"terms": {"field": "labels", "size": 50}},
            "t": {"terms": {"field": "labels.team.name"}}}})
        eq(st, 200, "aggs: %s" % b)
        for name, key in (("r", "release"), ("all", None), ("t", "team.name")):
            counts = {}
            for d in DOCS:
                for v in values(d, key):
                    counts[v] = counts.get(v, 0) + 1
            want = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            got = [(x["key"], x["doc_count"]) for x in b["aggregations"][name]["buckets"]]
            eq(got, want[:len(got)], "%s terms on %s" % (label, name))
            eq(len(got), min(len(want), 20 if name == "r" else 50 if name == "all" else 10),
               label + " bucket count " + name)
        for order in ("asc", "desc"):
            st, b = n.req("POST", "/fl/_search", {
                "size": 100, "sort": [{"labels.release": order}, {"n": "asc"}]})
            eq(st, 200, "sort: %s" % b)

            def key(i):
                vs = values(DOCS[i], "release")
                if not vs:
                    return (1, "", i)
                v = min(vs) if order == "asc" else max(vs)
                return (0, v, i)
            idx = list(range(len(DOCS)))
            with_v = sorted([i for i in idx if key(i)[0] == 0],
                            key=lambda i: (key(i)[1], i), reverse=False)
            if order == "desc":
                with_v = sorted([i for i in idx if key(i)[0] == 0],
                                key=lambda i: (_neg(key(i)[1]), i))
            want = [str(i) for i in with_v] + [str(i) for i in idx if key(i)[0] == 1]
            eq([h["_id"] for h in b["hits"]["hits"]], want, "%s sort %s" % (label, order))
        # the term suggester reads a key's values as keywords
        st, b = n.req("POST", "/fl/_search", {"size": 0, "suggest": {"s": {
            "text": "v1.3", "term": {"field": "labels.release", "size": 2}}}})
        df = {v: sum(1 for d in DOCS if v in values(d, "release")) for v in ("v1.0", "v1.2")}
        want = sorted(df, key=lambda v: (-df[v], v))
        eq((st, [(o["text"], o["score"], o["freq"]) for o in b["suggest"]["s"][0]["options"]]),
           (200, [(v, 0.75, df[v]) for v in want]), label + ": suggest on a key")
        st, b = n.req("GET", "/fl/_doc/3")
        eq((st, b["_source"]), (200, DOCS[3]), label + ": _source as sent")
        i = next(k for k, d in enumerate(DOCS) if d.get("labels"))
        st, b = n.req("POST", "/fl/_search", {"query": {"ids": {"values": [str(i)]}},
                                             "fields": ["labels"]})
        eq((st, b["hits"]["hits"][0].get("fields")), (200, {"labels": [DOCS[i]["labels"]]}),
           label + ": fields returns the object")


def _neg(s):
    """A key that sorts strings in reverse (for desc with ascending ties)."""
    return [-ord(c) for c in s] + [1]


@test
def flattened_mapping_and_field_caps():
    for label, w, nodes in targets():
        make_index(w)
        n = nodes[0]
        st, b = n.req("GET", "/fl/_mapping")
        eq((st, b["fl"]["mappings"]["properties"]["labels"]), (200, {
            "type": "flattened", "ignore_above": 6, "depth_limit": 2, "null_value": "none"}),
            label + " mapping")
        st, b = n.req("GET", "/fl/_field_caps?fields=labels*")
        eq((st, b["fields"]), (200, {"labels": {"flattened": {
            "type": "flattened", "searchable": True, "aggregatable": True}}}),
            label + " field caps")
        # doc_values false: not aggregatable; index false: not searchable
        st, b = w.req("PUT", "/fl2", {"settings": {"number_of_shards": 2}, "mappings": {
            "properties": {"a": {"type": "flattened", "doc_values": False},
                           "b": {"type": "flattened", "index": False}}}})
        eq(st, 200, "fl2: %s" % b)
        st, b = n.req("GET", "/fl2/_field_caps?fields=*")
        eq((b["fields"]["a"]["flattened"]["aggregatable"],
            b["fields"]["b"]["flattened"]["searchable"]), (False, False), label + " caps")
        for props, part in [
                ({"type": "flattened", "depth_limit": 0}, "[depth_limit] must be positive"),
                ({"type": "flattened", "properties": {"x": {"type": "keyword"}}},
                 "unknown parameter [properties] on mapper [x1] of type [flattened]"),
                ({"type": "flattened", "fields": {"k": {"type": "keyword"}}},
                 "unknown parameter [fields] on mapper [x1] of type [flattened]"),
                ({"type": "flattened", "copy_to": "y"},
                 "unknown parameter [copy_to] on mapper [x1] of type [flattened]"),
                ({"type": "flattened", "split_queries_on_whitespace": True},
                 "unknown parameter [split_queries_on_whitespace]")]:
            error_is(w.req("PUT", "/bad-fl", {"mappings": {"properties": {"x1": props}}}),
                     400, "mapper_parsing_exception", part)


@test
def flattened_document_errors_and_limits():
    for label, w, nodes in targets():
        make_index(w)
        n = nodes[-1]
        # depth_limit 2: the root object and one inner level
        st, b = n.req("PUT", "/fl/_doc/ok?refresh=true", {"labels": {"a": {"b": "deep"}}})
        eq(st, 201, label + ": depth 2: %s" % b)
        error_is(n.req("PUT", "/fl/_doc/bad", {"labels": {"a": {"b": {"c": "x"}}}}), 400,
                 "mapper_parsing_exception",
                 "The provided [flattened] field [labels] exceeds the maximum depth limit of "
                 "[2].")
        error_is(n.req("PUT", "/fl/_doc/bad", {"labels": "text"}), 400,
                 "mapper_parsing_exception", "failed to parse field [labels] of type "
                 "[flattened]")
        st, b = n.req("GET", "/fl/_doc/bad")
        eq(st, 404, label + ": nothing half-applied")
        eq(search_ids(n, {"query": {"term": {"labels.a.b": "deep"}}}), ["ok"],
           label + ": the inner key")
        # arrays of objects, dotted keys inside, numbers and booleans as text
        st, b = n.req("PUT", "/fl/_doc/arr?refresh=true", {"labels": [
            {"x.y": 1.5}, {"x": {"y": True}}, None]})
        eq(st, 201, label + ": arrays: %s" % b)
        eq(search_ids(n, {"query": {"terms": {"labels.x.y": ["1.5", "true"]}}}), ["arr"],
           label + ": dotted keys")
        st, b = n.req("POST", "/fl/_search", {"size": 0, "query": {"term": {"_id": "arr"}},
                                             "aggs": {"v": {"terms": {"field": "labels.x.y"}}}})
        eq([x["key"] for x in b["aggregations"]["v"]["buckets"]], ["1.5", "true"],
           label + ": values as text")
        for i in ("ok", "arr"):
            n.req("DELETE", "/fl/_doc/%s?refresh=true" % i)
        # a dynamic template may map a new object as flattened: its members
        # are keys, not new fields
        st, b = w.req("PUT", "/fl-dyn", {"mappings": {"dynamic_templates": [{"f": {
            "match": "lab*", "match_mapping_type": "object",
            "mapping": {"type": "flattened"}}}]}})
        eq(st, 200, "fl-dyn: %s" % b)
        st, b = n.req("PUT", "/fl-dyn/_doc/1?refresh=true", {"labels": {"a": {"b": "x"}},
                                                            "o": {"z": 1}})
        eq(st, 201, label + ": dynamic flattened: %s" % b)
        st, b = n.req("GET", "/fl-dyn/_mapping")
        eq(b["fl-dyn"]["mappings"]["properties"], {
            "labels": {"type": "flattened"}, "o": {"properties": {"z": {"type": "long"}}}},
           label + ": dynamic mapping")
        st, b = n.req("POST", "/fl-dyn/_search", {"query": {"term": {"labels.a.b": "x"}}})
        eq(b["hits"]["total"]["value"], 1, label + ": dynamic key")


if __name__ == "__main__":
    run_tests(budget_s=120, teardown=teardown)
