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
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-range-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown


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


# ---- queries against a model ----

I32 = (-2 ** 31, 2 ** 31 - 1)
I64 = (-2 ** 63, 2 ** 63 - 1)
INF = (float("-inf"), float("inf"))
IPS = (0, 2 ** 128 - 1)
V4 = 0xffff00000000  # IPv4 mapped into IPv6, as ES stores it


def ip_text(v):
    if V4 <= v <= V4 + 0xffffffff:
        return str(ipaddress.IPv4Address(v - V4))
    return str(ipaddress.IPv6Address(v))


class Kind:
    """How one range type's values are drawn, sent and read back."""

    def __init__(self, name, extremes, draw, send, step):
        self.name, self.extremes, self.draw, self.send, self.step = (
            name, extremes, draw, send, step)


def int_step(v, d):
    return v + d


def float_step(v, d):
    import math
    return math.nextafter(v, float("inf") if d > 0 else float("-inf"))


KINDS = [
    Kind("integer_range", I32, lambda r: r.randint(-20, 20), lambda v: v, int_step),
    Kind("long_range", I64, lambda r: r.randint(-20, 20) * 10 ** 12, lambda v: v, int_step),
    Kind("double_range", INF, lambda r: r.randint(-40, 40) / 2, lambda v: v, float_step),
    Kind("date_range", I64, lambda r: 1577836800000 + r.randint(0, 30) * 86400000,
         lambda v: v, int_step),
    Kind("ip_range", IPS, lambda r: V4 + (10 << 24) + r.randint(0, 40), ip_text, int_step),
]


def bound_pair(r, k, lo_keys=("gte", "gt"), hi_keys=("lte", "lt")):
    """A random range as sent ({"gte": ..} etc.) and as stored (inclusive
    bounds), or None when it is empty."""
    a, b = sorted([k.draw(r), k.draw(r)])
    sent, lo, hi = {}, k.extremes[0], k.extremes[1]
    if r.random() < 0.85:
        key = r.choice(lo_keys)
        sent[key] = k.send(a)
        lo = a if key == "gte" else k.step(a, 1)
    if r.random() < 0.85:
        key = r.choice(hi_keys)
        sent[key] = k.send(b)
        hi = b if key == "lte" else k.step(b, -1)
    return sent, lo, hi


def doc_range(r, k):
    if k.name == "ip_range" and r.random() < 0.3:
        bits = r.randint(28, 32)
        a = k.draw(r) - V4
        base = a & ~((1 << (32 - bits)) - 1)
        return "%s/%d" % (ip_text(V4 + base), bits), V4 + base, V4 + base + (1 << (32 - bits)) - 1
    while True:
        sent, lo, hi = bound_pair(r, k)
        if lo <= hi:
            return sent, lo, hi


def related(rel, lo, hi, qlo, qhi):
    if rel == "within":
        return qlo <= lo and hi <= qhi
    if rel == "contains":
        return lo <= qlo and qhi <= hi
    return lo <= qhi and qlo <= hi


@test
def queries_model():
    r = random.Random(26)
    for k in KINDS:
        docs, model = [], {}
        for i in range(1, 61):
            n_ranges = r.choice([0, 1, 1, 1, 2, 3])
            sent, ranges = [], []
            for _ in range(n_ranges):
                s, lo, hi = doc_range(r, k)
                sent.append(s)
                ranges.append((lo, hi))
            if n_ranges == 0:
                d = {"other": 1}
            elif n_ranges == 1 and r.random() < 0.5:
                d = {"f": sent[0]}
            else:
                d = {"f": sent}
            docs.append((i, d))
            model[i] = ranges
        queries = []
        for _ in range(40):
            sent, qlo, qhi = bound_pair(r, k)
            rel = r.choice([None, "intersects", "within", "contains"])
            q = dict(sent)
            if rel:
                q["relation"] = rel
            want = [i for i, rs in model.items()
                    if qlo <= qhi and any(related(rel or "intersects", lo, hi, qlo, qhi)
                                          for lo, hi in rs)]
            queries.append(({"range": {"f": q}}, want))
        for _ in range(15):
            v = k.draw(r)
            want = [i for i, rs in model.items() if any(lo <= v <= hi for lo, hi in rs)]
            queries.append(({"term": {"f": k.send(v)}}, want))
            vs = [k.draw(r) for _ in range(3)]
            want = [i for i, rs in model.items()
                    if any(lo <= v <= hi for lo, hi in rs for v in vs)]
            queries.append(({"terms": {"f": [k.send(v) for v in vs]}}, want))
        queries.append(({"exists": {"field": "f"}}, [i for i, rs in model.items() if rs]))
        for label, n, asks in targets():
            index = "rq-" + k.name.replace("_", "-")
            make_index(n, index, {"f": {"type": k.name}}, docs)
            for merged in (False, True):
                for q, want in queries:
                    for a in asks:
                        eq(ids(a, index, q), [str(i) for i in want],
                           "%s %s %s%s" % (label, k.name, q, " merged" if merged else ""))
                n.req("POST", "/%s/_forcemerge?max_num_segments=1" % index)
            n.req("DELETE", "/" + index)


@test
def query_errors_and_fields():
    for label, n, asks in targets():
        make_index(n, "rqe", {"i": {"type": "integer_range", "store": True},
                              "t": {"type": "date_range", "format": "yyyy-MM-dd"},
                              "p": {"type": "ip_range"}},
                   [(1, {"i": {"gte": 0, "lt": 42}, "t": {"gte": "2020-01-05"},
                         "p": "10.0.0.0/8"}),
                    (2, {"i": [{"gt": 50}, {"lte": -5}], "p": {"gte": "::1", "lte": "::2"}})],
                   shards=1)
        for q in ({"term": {"i": "abc"}}, {"range": {"i": {"gte": "x"}}},
                  {"term": {"p": "10.0.0.300"}}, {"range": {"t": {"lte": "05/01/2020"}}}):
            st, b = asks[-1].req("POST", "/rqe/_search", {"query": q})
            eq(st, 400, "%s %s: %s" % (label, q, b))
        eq(ids(asks[0], "rqe", {"range": {"i": {"gte": 41, "lte": 41}}}), ["1"], label)
        eq(ids(asks[0], "rqe", {"range": {"i": {"gte": 42, "lte": 50}}}), [], label)
        eq(ids(asks[0], "rqe", {"range": {"i": {"gt": -6, "lt": 0}}}), ["2"], label)
        # a date bound reads in the field's format; date math rounds
        eq(ids(asks[0], "rqe", {"range": {"t": {"lte": "2020-01-05"}}}), ["1"], label)
        eq(ids(asks[0], "rqe", {"range": {"t": {"lt": "2020-01-05"}}}), [], label)
        eq(ids(asks[0], "rqe", {"term": {"t": "2030-01-01"}}), ["1"], label)
        eq(ids(asks[0], "rqe", {"range": {"t": {"gte": "2020-01-06", "relation": "within"}}}),
           [], label)
        eq(ids(asks[0], "rqe", {"term": {"p": "10.255.0.1"}}), ["1"], label)
        # match and query_string read the value as term does
        eq(ids(asks[0], "rqe", {"match": {"i": 41}}), ["1"], label)
        eq(ids(asks[0], "rqe", {"query_string": {"query": "i:51"}}), ["2"], label)
        st, b = asks[-1].req("POST", "/rqe/_search", {"sort": ["i"]})
        eq(st, 400, label + " sort on a range field: %s" % b)
        for body in ({"query": {"prefix": {"i": "1"}}}, {"query": {"fuzzy": {"i": "1"}}},
                     {"aggs": {"c": {"composite": {"sources": [{"h": {"terms": {"field": "i"}}}]}}}},
                     {"aggs": {"t": {"top_hits": {"sort": ["i"]}}}}):
            st, b = asks[-1].req("POST", "/rqe/_search", body)
            eq(st, 400, label + " %s: %s" % (body, b))
        # a query over every field reads the range field leniently
        eq(ids(asks[0], "rqe", {"query_string": {"query": "51"}}), ["2"], label)
        eq(ids(asks[0], "rqe", {"query_string": {"query": "abc"}}), [], label)
        eq(ids(asks[0], "rqe", {"range": {"p": {"gte": "10.1.0.0/16", "relation": "within"}}}),
           [], label)
        eq(ids(asks[0], "rqe", {"range": {"p": {"gte": "10.1.0.0", "lte": "10.1.255.255",
                                                "relation": "contains"}}}), ["1"], label)
        st, b = asks[-1].req("POST", "/rqe/_search", {"query": {"ids": {"values": ["1", "2"]}},
                                                      "fields": ["i", "t", "p"], "sort": ["_id"]})
        eq(st, 200, label)
        eq([h.get("fields") for h in b["hits"]["hits"]],
           [{"i": [{"gte": 0, "lt": 42}], "t": [{"gte": "2020-01-05"}], "p": ["10.0.0.0/8"]},
            {"i": [{"gt": 50}, {"lte": -5}], "p": [{"gte": "::1", "lte": "::2"}]}],
           label + " fields")
        # a stored range comes back as _source holds it
        st, b = asks[-1].req("GET", "/rqe/_doc/2?stored_fields=i")
        eq((st, b.get("fields")), (200, {"i": [{"gt": 50}, {"lte": -5}]}), label + " stored")
        n.req("DELETE", "/rqe")


# ---- histograms ----

def hist_model(ranges_by_doc, interval, hmin=None, hmax=None):
    """{bucket key: docs} as ES 7.10 counts ranges: a doc once in every
    bucket one of its ranges overlaps, ranges cut to the hard bounds."""
    import math
    counts = {}
    for rs in ranges_by_doc.values():
        keys = set()
        for lo, hi in rs:
            if hmin is not None:
                lo = max(lo, hmin)
            if hmax is not None:
                hi = min(hi, hmax)
            if lo > hi:
                continue
            for k in range(math.floor(lo / interval), math.floor(hi / interval) + 1):
                keys.add(k * interval)
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
    return counts


def buckets(n, index, agg):
    st, b = n.req("POST", "/%s/_search" % index, {"size": 0, "aggs": {"h": agg}})
    eq(st, 200, "%s %s: %s" % (index, agg, b))
    return {bk["key"]: bk["doc_count"] for bk in b["aggregations"]["h"]["buckets"]}


@test
def histograms_model():
    r = random.Random(7)
    day = 86400000
    base = 1577836800000  # 2020-01-01
    for kind in ("integer_range", "double_range", "date_range"):
        docs, model = [], {}
        for i in range(1, 41):
            rs, sent = [], []
            for _ in range(r.choice([0, 1, 1, 2, 3])):
                if kind == "date_range":
                    a = base + r.randint(0, 40) * day // 4
                    b = a + r.randint(0, 10) * day // 3
                elif kind == "double_range":
                    a = r.randint(-40, 40) / 4
                    b = a + r.randint(0, 30) / 4
                else:
                    a = r.randint(-30, 30)
                    b = a + r.randint(0, 25)
                rs.append((a, b))
                sent.append({"gte": a, "lte": b})
            model[i] = rs
            docs.append((i, {"f": sent} if sent else {"x": 1}))
        for label, n, asks in targets():
            index = "rh-" + kind.replace("_", "-")
            make_index(n, index, {"f": {"type": kind}}, docs)
            if kind == "date_range":
                aggs = [({"date_histogram": {"field": "f", "calendar_interval": "day",
                                             "min_doc_count": 1}}, day, None, None),
                        ({"date_histogram": {"field": "f", "fixed_interval": "3d",
                                             "min_doc_count": 1,
                                             "hard_bounds": {"min": base + 5 * day,
                                                             "max": base + 9 * day}}},
                         3 * day, base + 5 * day, base + 9 * day)]
            else:
                aggs = [({"histogram": {"field": "f", "interval": 5, "min_doc_count": 1}},
                         5, None, None),
                        ({"histogram": {"field": "f", "interval": 2.5, "min_doc_count": 1,
                                        "hard_bounds": {"min": -3, "max": 12}}}, 2.5, -3, 12)]
            for agg, interval, hmin, hmax in aggs:
                # a range cut to the hard bounds keeps the bucket of its cut
                # start, even when that bucket's key is below the bound
                want = hist_model(model, interval, hmin, hmax)
                for a in asks:
                    got = buckets(a, index, agg)
                    eq(got, {k: want[k] for k in sorted(want)}, "%s %s %s" % (label, kind, agg))
            n.req("DELETE", "/" + index)


@test
def histogram_hard_bounds():
    # open ranges are cut to the hard bounds; the empty buckets between
    # are filled (min_doc_count 0); a plain numeric field keeps the
    # buckets inside the bounds only
    for label, n, asks in targets():
        make_index(n, "rhb", {"r": {"type": "long_range"}, "v": {"type": "long"}},
                   [(1, {"r": {"lte": 10}, "v": 3}), (2, {"r": {"gte": 15}, "v": 30})])
        got = buckets(asks[-1], "rhb", {"histogram": {"field": "r", "interval": 1,
                                                      "hard_bounds": {"min": 0, "max": 20}}})
        want = {k: (1 if k <= 10 or k >= 15 else 0) for k in range(0, 21)}
        eq(got, want, label + " long_range")
        got = buckets(asks[0], "rhb", {"histogram": {"field": "v", "interval": 5,
                                                     "hard_bounds": {"min": 0, "max": 20}}})
        eq(got, {0: 1}, label + " long")
        st, b = asks[0].req("POST", "/rhb/_search", {"size": 0, "aggs": {"t": {"terms": {
            "field": "r"}}}})
        eq(st, 400, label + " terms on a range field: %s" % b)
        n.req("DELETE", "/rhb")



if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
