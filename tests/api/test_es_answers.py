"""Answers Elasticsearch gives that Shoal once got wrong (issue #26, "wrong
answers"), each checked on a solo node and a 3-node static cluster over
indices of 1 and 3 shards, so both the single-shard path and the
coordinator's reduce of partial aggregations are exercised. The expected
values follow Elasticsearch's documented behaviour; the documents are the
test's own."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-es-answers-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown
SHARDS = (1, 3)


def nodes():
    return (("solo", solo()), ("cluster", cluster()["node-1"]))


def make(n, index, shards, mappings, docs, settings=None):
    """Creates index (deleting an older one) and bulk-loads docs, a list of
    (id, source)."""
    n.req("DELETE", "/" + index)
    body = {"settings": dict({"number_of_shards": shards, "number_of_replicas": 0},
                             **(settings or {}))}
    if mappings is not None:
        body["mappings"] = mappings
    st, b = n.req("PUT", "/" + index, body)
    eq(st, 200, "create %s: %s" % (index, b))
    if docs:
        lines = []
        for i, src in docs:
            lines += [{"index": {"_index": index, "_id": str(i)}}, src]
        st, b = n.bulk(lines, params="?refresh=true")
        eq((st, b.get("errors")), (200, False), "bulk %s: %s" % (index, b))


def search(n, path, body, what=""):
    st, b = n.req("POST", path, body)
    if st != 200:
        raise AssertionError("%s: search failed %d: %s" % (what, st, b))
    return b


def ids(b):
    return [h["_id"] for h in b["hits"]["hits"]]


def each():
    """(label, node, shards) for every target and shard count."""
    for label, n in nodes():
        for shards in SHARDS:
            yield "%s/%d shard(s)" % (label, shards), n, shards


# ---- 1. range query bounds beyond a float type's range ----

@test
def range_query_float_bounds_outside_the_type():
    docs = [("min", {"h": -65504, "f": -3.4028235E38}),
            ("max", {"h": 65504, "f": 3.4028235E38}),
            ("1", {"h": -1, "f": -1}), ("2", {"h": 1, "f": 1}),
            ("3", {"k": "neither field"})]
    cases = [
        ({"lte": 1e300, "gt": 0}, ["2", "max"]),
        ({"gte": -1e300, "lt": 0}, ["min", "1"]),
        ({"gte": -1e40, "lte": 1e40}, ["min", "1", "2", "max"]),
        ({"lt": 1e40}, ["min", "1", "2", "max"]),
        ({"gt": -1e40, "lt": 0}, ["min", "1"]),
        ({"lt": 1, "gt": -1}, []),
        ({"lte": 1, "gte": -1}, ["1", "2"]),
    ]
    per_type = {
        "h": [({"gte": -65504, "lt": 0}, ["min", "1"]), ({"gt": -65504, "lt": 0}, ["1"]),
              ({"lte": 65504, "gt": 0}, ["2", "max"]), ({"lt": 65504, "gt": 0}, ["2"]),
              ({"lte": 65519, "gt": 0}, ["2", "max"])],
        "f": [({"gte": -3.4028235E38, "lt": 0}, ["min", "1"]),
              ({"gt": -3.4028235E38, "lt": 0}, ["1"]),
              ({"lte": 3.4028235E38, "gt": 0}, ["2", "max"]),
              ({"lt": 3.4028235E38, "gt": 0}, ["2"])],
    }
    for label, n, shards in each():
        make(n, "rq", shards, {"properties": {"h": {"type": "half_float"},
                                              "f": {"type": "float"},
                                              "k": {"type": "keyword"}}}, docs)
        # the boundary values themselves index (3.4028235E38 is FLT_MAX)
        st, b = n.req("GET", "/rq/_doc/max")
        eq((st, b.get("found")), (200, True), label + " max doc")
        for field in ("h", "f"):
            for rng, want in cases + per_type[field]:
                b = search(n, "/rq/_search", {"query": {"range": {field: rng}},
                                              "sort": [{field: "asc"}]}, label)
                eq(ids(b), want, "%s %s %s" % (label, field, rng))
        # a value past the type's range is still refused at index time
        st, b = n.req("PUT", "/rq/_doc/over?refresh=true", {"f": 3.5e38})
        eq(st, 400, label + " float 3.5e38 refused: %s" % b)
        st, b = n.req("PUT", "/rq/_doc/over?refresh=true", {"h": 65520})
        eq(st, 400, label + " half_float 65520 refused: %s" % b)


# ---- 2. range aggregation bounds in the field's precision ----

@test
def range_agg_float_bounds_in_field_precision():
    docs = [("1", {"f": 0.01, "h": 0.01, "d": 0.01}),
            ("2", {"f": 0.03, "h": 0.03, "d": 0.03}),
            ("3", {"f": 0.04, "h": 0.04, "d": 0.04}),
            ("4", {"f": 0.7, "h": 0.7, "d": 0.7})]
    ranges = [{"to": 0.02}, {"from": 0.02, "to": 0.04}, {"from": 0.04, "to": 0.7},
              {"from": 0.7}]
    for label, n, shards in each():
        make(n, "ra", shards, {"properties": {"h": {"type": "half_float"},
                                              "f": {"type": "float"},
                                              "d": {"type": "double"}}}, docs)
        for field in ("f", "h", "d"):
            b = search(n, "/ra/_search", {"size": 0, "aggs": {"r": {"range": {
                "field": field, "ranges": ranges}}}}, label)
            got = [(x["key"], x.get("from"), x.get("to"), x["doc_count"])
                   for x in b["aggregations"]["r"]["buckets"]]
            # bounds are reported as given, compared as the field stores them
            eq(got, [("*-0.02", None, 0.02, 1), ("0.02-0.04", 0.02, 0.04, 1),
                     ("0.04-0.7", 0.04, 0.7, 1), ("0.7-*", 0.7, None, 1)],
               "%s range on %s" % (label, field))


# ---- 3. a date bound with missing components rounds up to day 01 ----

@test
def range_query_date_year_format_rounds_up_to_jan_first():
    docs = [("first", {"date": "1900-01-01T12:12:12.123Z"}),
            ("second", {"date": "2022-01-01T12:12:12.123Z"}),
            ("third", {"date": "2022-01-03T12:12:12.123Z"}),
            ("fourth", {"date": "1500-01-01T12:12:12.123Z"}),
            ("fifth", {"date": "1500-01-05T12:12:12.123Z"})]
    # ES fills a missing month and day with 01 and a missing time with its
    # maximum: "lte": 1500 is 1500-01-01T23:59:59.999, "gt": "1500-01"
    # excludes 1500-01-01 only
    cases = [({"gte": 1000, "lte": 2023, "format": "uuuu"},
              ["fourth", "fifth", "first", "second", "third"]),
             ({"gte": 1500, "lte": 1500, "format": "uuuu"}, ["fourth"]),
             ({"gte": 1500, "lte": 2000, "format": "uuuu"}, ["fourth", "fifth", "first"]),
             ({"gte": "1500", "lte": "2022", "format": "yyyy"},
              ["fourth", "fifth", "first", "second"]),
             ({"gt": 1500, "lt": 2022, "format": "uuuu"}, ["fifth", "first"]),
             ({"gte": "1500-01", "lte": "1500-01", "format": "uuuu-MM"}, ["fourth"]),
             ({"gt": "2022-01", "format": "yyyy-MM"}, ["third"]),
             ({"lte": "2022-01-01"}, ["fourth", "fifth", "first", "second"]),
             ({"lte": "2022-01-01T12"}, ["fourth", "fifth", "first", "second"]),
             ({"lte": "2022-01-01T12:12:11"}, ["fourth", "fifth", "first"]),
             # custom patterns round up by their finest field
             ({"gte": "01/01/1500", "lte": "01/01/1500", "format": "dd/MM/yyyy"}, ["fourth"]),
             ({"gt": "01/01/2022", "format": "dd/MM/yyyy"}, ["third"]),
             ({"lte": "01/01/2022 12h", "format": "dd/MM/yyyy HH'h'"},
              ["fourth", "fifth", "first", "second"]),
             ({"lte": "01/01/2022 12:11", "format": "dd/MM/yyyy HH:mm"},
              ["fourth", "fifth", "first"]),
             ({"lte": "01/01/2022 12:12:12.000", "format": "dd/MM/yyyy HH:mm:ss.SSS"},
              ["fourth", "fifth", "first"]),
             ({"lte": "2022/01/01", "format": "epoch_millis||yyyy/MM/dd"},
              ["fourth", "fifth", "first", "second"])]
    for label, n, shards in each():
        make(n, "dates", shards, {"properties": {"date": {"type": "date"}}}, docs)
        make(n, "dates_year_only", shards,
             {"properties": {"date": {"type": "date", "format": "uuuu"}}},
             [("first", {"date": "1900"}), ("second", {"date": "2022"}),
              ("fourth", {"date": "1500"})])
        for rng, want in cases:
            b = search(n, "/dates/_search", {"query": {"range": {"date": rng}},
                                             "sort": ["date"]}, label)
            eq(ids(b), want, "%s %s" % (label, rng))
        b = search(n, "/dates_year_only/_search", {"query": {"match": {"date": "1500"}}}, label)
        eq(ids(b), ["fourth"], label + " match 1500 on a uuuu field")
        # without a "format" in the query, the field's mapping format reads the bound
        b = search(n, "/dates_year_only/_search", {"query": {"range": {"date": {
            "gt": "1500", "lte": "2022"}}}, "sort": ["date"]}, label)
        eq(ids(b), ["first", "second"], label + " the mapping's uuuu")
        make(n, "dates_dmy", shards, {"properties": {"date": {
            "type": "date", "format": "dd/MM/yyyy HH:mm||dd/MM/yyyy"}}},
             [("a", {"date": "01/01/2022 10:00"}), ("b", {"date": "02/01/2022 10:00"})])
        b = search(n, "/dates_dmy/_search", {"query": {"range": {"date": {
            "lte": "01/01/2022"}}}}, label)
        eq(ids(b), ["a"], label + " the mapping's dd/MM/yyyy, rounded up")
        b = search(n, "/dates_dmy/_search", {"query": {"range": {"date": {
            "gte": "2022-01-02T00:00:00Z"}}}}, label)
        eq(ids(b), ["b"], label + " a bound the mapping's format does not read: the default")


# ---- 4. terms over a field that is long in one index, double in another ----

@test
def terms_long_and_double_indices_merge_as_numbers():
    for label, n, shards in each():
        make(n, "mix_long", shards, {"properties": {"n": {"type": "long"}}},
             [("1", {"n": 1}), ("2", {"n": 2}), ("3", {"n": 3}), ("4", {"n": 1})])
        make(n, "mix_double", shards, {"properties": {"n": {"type": "double"}}},
             [("1", {"n": 1.0}), ("2", {"n": 2.0}), ("3", {"n": 3.5})])
        b = search(n, "/mix_long,mix_double/_search?typed_keys",
                   {"size": 0, "aggs": {"t": {"terms": {"field": "n"}, "aggs": {
                       "s": {"sum": {"field": "n"}}}}}}, label)
        t = b["aggregations"]["dterms#t"]
        eq([(x["key"], x["doc_count"], x["sum#s"]["value"]) for x in t["buckets"]],
           [(1.0, 3, 3.0), (2.0, 2, 4.0), (3.0, 1, 3.0), (3.5, 1, 3.5)],
           label + " buckets")
        eq(all(isinstance(x["key"], float) for x in t["buckets"]), True,
           label + " keys rendered as doubles")
        b = search(n, "/mix_long,mix_double/_search",
                   {"size": 0, "aggs": {"t": {"terms": {"field": "n", "size": 2,
                                                        "order": {"_key": "desc"}}}}}, label)
        eq([(x["key"], x["doc_count"]) for x in b["aggregations"]["t"]["buckets"]],
           [(3.5, 1), (3.0, 1)], label + " by key, descending")
        # one index alone keeps its own key type
        b = search(n, "/mix_long/_search", {"size": 0, "aggs": {"t": {"terms": {"field": "n"}}}},
                   label)
        eq([(x["key"], x["doc_count"]) for x in b["aggregations"]["t"]["buckets"]],
           [(1, 2), (2, 1), (3, 1)], label + " long index alone")
        eq(isinstance(b["aggregations"]["t"]["buckets"][0]["key"], int), True,
           label + " long keys stay integers")


# ---- 5. terms on ip and date fields: include/exclude values, min_doc_count 0 ----

T5_MAPPING = {"properties": {"ip": {"type": "ip"}, "date": {"type": "date"},
                             "ok": {"type": "boolean"}, "k": {"type": "keyword"}}}
T5_DOCS = [("1", {"ip": "::1", "date": "2016-05-03", "ok": True, "k": "a"}),
           ("2", {"ip": "127.0.0.1", "date": "2014-09-01", "ok": False, "k": "a"}),
           ("3", {"ip": "::1", "date": "2016-05-03", "ok": True, "k": "b"}),
           ("4", {"k": "c"})]
D16, D14 = 1462233600000, 1409529600000


def terms(n, index, body, what, query=None):
    req = {"size": 0, "aggs": {"t": {"terms": body}}}
    if query:
        req["query"] = query
    b = search(n, "/%s/_search" % index, req, what)
    return [(x["key"], x.get("key_as_string"), x["doc_count"])
            for x in b["aggregations"]["t"]["buckets"]]


@test
def terms_ip_and_date_fill_as_es():
    for label, n, shards in each():
        make(n, "t5", shards, T5_MAPPING, T5_DOCS)
        # exact include / exclude values are read as the field reads them
        eq(terms(n, "t5", {"field": "ip", "include": ["127.0.0.1"]}, label),
           [("127.0.0.1", None, 1)], label + " ip include")
        eq(terms(n, "t5", {"field": "ip", "exclude": ["127.0.0.1"]}, label),
           [("::1", None, 2)], label + " ip exclude")
        eq(terms(n, "t5", {"field": "ip", "include": ["0:0:0:0:0:0:0:1", "10.0.0.1"]}, label),
           [("::1", None, 2)], label + " ip include, another spelling")
        eq(terms(n, "t5", {"field": "date", "include": ["2016-05-03"]}, label),
           [(D16, "2016-05-03T00:00:00.000Z", 2)], label + " date include")
        eq(terms(n, "t5", {"field": "date", "exclude": ["2016-05-03"]}, label),
           [(D14, "2014-09-01T00:00:00.000Z", 1)], label + " date exclude")
        eq(terms(n, "t5", {"field": "date", "include": [str(D14)]}, label),
           [(D14, "2014-09-01T00:00:00.000Z", 1)], label + " date include in millis")
        eq(terms(n, "t5", {"field": "date", "format": "yyyy/MM/dd",
                           "include": ["2014/09/01"]}, label),
           [(D14, "2014/09/01", 1)], label + " date include in the agg's format")
        eq(terms(n, "t5", {"field": "ok", "include": ["true"]}, label),
           [(1, "true", 2)], label + " boolean include")
        eq(terms(n, "t5", {"field": "ok", "exclude": ["true"]}, label),
           [(0, "false", 1)], label + " boolean exclude")
        # min_doc_count 0: every value of the field, matched or not
        only_c = {"term": {"k": "c"}}
        eq(terms(n, "t5", {"field": "ip", "min_doc_count": 0}, label, only_c),
           [("::1", None, 0), ("127.0.0.1", None, 0)], label + " ip min_doc_count 0")
        eq(terms(n, "t5", {"field": "date", "min_doc_count": 0}, label, only_c),
           [(D14, "2014-09-01T00:00:00.000Z", 0), (D16, "2016-05-03T00:00:00.000Z", 0)],
           label + " date min_doc_count 0")
        eq(terms(n, "t5", {"field": "ok", "min_doc_count": 0}, label, only_c),
           [(0, "false", 0), (1, "true", 0)], label + " boolean min_doc_count 0")
        eq(terms(n, "t5", {"field": "date", "min_doc_count": 0}, label, {"term": {"k": "b"}}),
           [(D16, "2016-05-03T00:00:00.000Z", 1), (D14, "2014-09-01T00:00:00.000Z", 0)],
           label + " date min_doc_count 0, one matched")
        # missing on a mapped ip / date field is a value of that type
        eq(terms(n, "t5", {"field": "ip", "missing": "127.0.0.1"}, label),
           [("::1", None, 2), ("127.0.0.1", None, 2)], label + " ip missing joins its value")
        eq(terms(n, "t5", {"field": "date", "missing": "2014-09-01"}, label),
           [(D14, "2014-09-01T00:00:00.000Z", 2), (D16, "2016-05-03T00:00:00.000Z", 2)],
           label + " date missing joins its value")
        # a regular expression filters strings only: ES's
        # AggregationExecutionException is a 500 (it keeps the default
        # status), raised on every shard as it builds the aggregators, so
        # the search fails as a whole, shards without documents included
        def agg_exec(b):
            return (b.get("error", {}).get("type"),
                    b.get("error", {}).get("root_cause", [{}])[0].get("type"))
        for field in ("ip", "date", "ok"):
            st, b = n.req("POST", "/t5/_search", {"size": 0, "aggs": {"t": {"terms": {
                "field": field, "exclude": "127.*"}}}})
            eq((st,) + agg_exec(b), (500, "search_phase_execution_exception",
                                     "aggregation_execution_exception"),
               "%s regex on %s: %s" % (label, field, b))
            # significant_terms reads include / exclude as terms does
            st, b = n.req("POST", "/t5/_search", {"size": 0, "aggs": {"t": {
                "significant_terms": {"field": field, "exclude": "127.*"}}}})
            eq((st,) + agg_exec(b), (500, "search_phase_execution_exception",
                                     "aggregation_execution_exception"),
               "%s significant_terms regex on %s: %s" % (label, field, b))
        # one document over five shards: the four without it refuse too
        make(n, "t6", 5, T5_MAPPING, T5_DOCS[:1])
        st, b = n.req("POST", "/t6/_search", {"size": 0, "aggs": {"t": {"terms": {
            "field": "ip", "exclude": "127.*"}}}})
        eq((st,) + agg_exec(b), (500, "search_phase_execution_exception",
                                 "aggregation_execution_exception"),
           "%s regex, empty shards: %s" % (label, b))
        st, b = n.req("POST", "/t6/_search", {"size": 0, "aggs": {"p": {"percentiles": {
            "field": "k"}}}})
        error_is((st, b), 400, "illegal_argument_exception",
                 "Field [k] of type [keyword] is not supported for aggregation [percentiles]")
        n.req("DELETE", "/t6")
        # significant_terms keys an address by its text, as terms does
        st, b = n.req("POST", "/t5/_search", {"size": 0, "query": {"term": {"ip": "::1"}},
                                              "aggs": {"s": {"significant_terms": {
                                                  "field": "ip", "min_doc_count": 1}}}})
        eq([(x["key"], x["doc_count"]) for x in b["aggregations"]["s"]["buckets"]],
           [("::1", 2)], label + " significant_terms ip key: %s" % b)


# ---- 6. an unmapped date in terms: millis as key, the text as key_as_string ----

@test
def terms_unmapped_date_keys_are_millis():
    d11 = 1462924800000
    for label, n, shards in each():
        make(n, "t6_date", shards, {"properties": {"date": {"type": "date"},
                                                   "ip": {"type": "ip"}}},
             [("1", {"date": "2016-05-11", "ip": "127.0.0.1"}), ("2", {})])
        make(n, "t6_none", shards, {"properties": {"k": {"type": "keyword"}}},
             [("1", {"k": "x"})])
        eq(terms(n, "t6_none", {"field": "unmapped_date", "value_type": "date",
                                "missing": "2016-05-11"}, label),
           [(d11, "2016-05-11T00:00:00.000Z", 1)], label + " unmapped, value_type date")
        eq(terms(n, "t6_none", {"field": "unmapped_boolean", "value_type": "boolean",
                                "missing": True}, label),
           [(1, "true", 1)], label + " unmapped, value_type boolean")
        eq(terms(n, "t6_none", {"field": "unmapped_long", "value_type": "long",
                                "missing": 3}, label), [(3, None, 1)], label + " long")
        eq(terms(n, "t6_none", {"field": "unmapped_double", "value_type": "double",
                                "missing": 3}, label), [(3.0, None, 1)], label + " double")
        eq(terms(n, "t6_none", {"field": "unmapped_string", "value_type": "string",
                                "missing": "abc"}, label), [("abc", None, 1)], label + " string")
        # mapped as a date in one index, unmapped in the other: one bucket
        for extra in ({"value_type": "date"}, {}):
            eq(terms(n, "t6_date,t6_none", dict({"field": "date", "missing": "2016-05-11"},
                                                 **extra), label),
               [(d11, "2016-05-11T00:00:00.000Z", 3)], "%s date in one index %s" % (label, extra))
        eq(terms(n, "t6_date,t6_none", {"field": "ip", "missing": "127.0.0.1"}, label),
           [("127.0.0.1", None, 3)], label + " ip in one index")


# ---- 9. boolean terms carry key_as_string ----

@test
def terms_boolean_key_as_string():
    for label, n, shards in each():
        make(n, "t9", shards, {"properties": {"ok": {"type": "boolean"},
                                              "k": {"type": "keyword"}}},
             [("1", {"ok": True, "k": "a"}), ("2", {"ok": False, "k": "a"}),
              ("3", {"ok": True, "k": "b"})])
        make(n, "t9_none", shards, {"properties": {"k": {"type": "keyword"}}},
             [("1", {"k": "x"})])
        eq(terms(n, "t9", {"field": "ok"}, label), [(1, "true", 2), (0, "false", 1)],
           label + " boolean terms")
        b = search(n, "/t9/_search", {"size": 0, "aggs": {"k": {"terms": {"field": "k"}, "aggs": {
            "t": {"terms": {"field": "ok"}}}}}}, label)
        got = [(x["key"], [(y["key"], y.get("key_as_string"), y["doc_count"])
                           for y in x["t"]["buckets"]])
               for x in b["aggregations"]["k"]["buckets"]]
        eq(got, [("a", [(0, "false", 1), (1, "true", 1)]), ("b", [(1, "true", 1)])],
           label + " boolean terms under terms")
        eq(terms(n, "t9,t9_none", {"field": "ok", "missing": False}, label),
           [(0, "false", 2), (1, "true", 2)], label + " boolean with an unmapped index")
        # where no index maps the field, value_type says it is a boolean
        eq(terms(n, "t9_none", {"field": "ok", "value_type": "boolean", "missing": True},
                 label), [(1, "true", 1)], label + " unmapped boolean, value_type")
        eq(terms(n, "t9", {"field": "ok", "min_doc_count": 0}, label,
                 {"term": {"k": "b"}}), [(1, "true", 1), (0, "false", 0)],
           label + " boolean min_doc_count 0")


# ---- 7. date_histogram extended_bounds with an offset ----

@test
def date_histogram_extended_bounds_with_offset():
    h = {"calendar_interval": "day", "offset": "1h",
         "extended_bounds": {"min": "2016-01-01", "max": "2016-01-04"}}
    want = [("2016-01-01T01:00:00.000Z", 1), ("2016-01-02T01:00:00.000Z", 1),
            ("2016-01-03T01:00:00.000Z", 0), ("2016-01-04T01:00:00.000Z", 0)]
    for label, n, shards in each():
        make(n, "dh_nested", shards, {"properties": {"foo": {"type": "nested"}}},
             [("1", {"foo": {"date": "2016-01-02"}}), ("2", {"foo": {"date": "2016-01-03"}})])
        make(n, "dh_flat", shards, {"properties": {"date": {"type": "date"}}},
             [("1", {"date": "2016-01-02"}), ("2", {"date": "2016-01-03"})])
        make(n, "dh_unmapped", shards, None, [])
        for idx in ("dh_nested,dh_unmapped", "dh_nested"):
            b = search(n, "/%s/_search" % idx, {"size": 0, "aggs": {"foo": {
                "nested": {"path": "foo"}, "aggs": {"histo": {"date_histogram": dict(
                    h, field="foo.date")}}}}}, label)
            eq([(x["key_as_string"], x["doc_count"])
                for x in b["aggregations"]["foo"]["histo"]["buckets"]], want,
               "%s nested %s" % (label, idx))
        for idx, w in (("dh_flat,dh_unmapped", want), ("dh_flat", want),
                       ("dh_unmapped", [(k, 0) for k, _ in want])):
            b = search(n, "/%s/_search" % idx, {"size": 0, "aggs": {"histo": {
                "date_histogram": dict(h, field="date")}}}, label)
            eq([(x["key_as_string"], x["doc_count"])
                for x in b["aggregations"]["histo"]["buckets"]], w, "%s %s" % (label, idx))


# ---- 8. histogram (and numeric terms) "format" gives key_as_string ----

@test
def histogram_format_key_as_string():
    for label, n, shards in each():
        make(n, "hf", shards, {"properties": {"number": {"type": "integer"},
                                              "price": {"type": "double"}}},
             [(str(i), {"number": v, "price": v / 2}) for i, v in
              enumerate([1, 51, 101, 151])])
        b = search(n, "/hf/_search", {"size": 0, "aggs": {"histo": {"histogram": {
            "field": "number", "interval": 50, "format": "Value is ##0.0"}}}}, label)
        eq([(x["key"], x.get("key_as_string"), x["doc_count"])
            for x in b["aggregations"]["histo"]["buckets"]],
           [(0, "Value is 0.0", 1), (50, "Value is 50.0", 1), (100, "Value is 100.0", 1),
            (150, "Value is 150.0", 1)], label + " histogram format")
        b = search(n, "/hf/_search", {"size": 0, "aggs": {"histo": {"histogram": {
            "field": "number", "interval": 50}}}}, label)
        eq(any("key_as_string" in x for x in b["aggregations"]["histo"]["buckets"]), False,
           label + " no format, no key_as_string")
        b = search(n, "/hf/_search", {"size": 0, "aggs": {"histo": {"histogram": {
            "field": "number", "interval": 100, "format": "#,##0.00", "keyed": True}}}}, label)
        eq(sorted(b["aggregations"]["histo"]["buckets"].keys()), ["0.00", "100.00"],
           label + " keyed by the formatted key")
        b = search(n, "/hf/_search", {"size": 0, "aggs": {
            "l": {"terms": {"field": "number", "format": "000", "size": 1,
                            "order": {"_key": "asc"}}},
            "d": {"terms": {"field": "price", "format": "0.0", "size": 1,
                            "order": {"_key": "desc"}}}}}, label)
        eq([(x["key"], x.get("key_as_string")) for x in b["aggregations"]["l"]["buckets"]],
           [(1, "001")], label + " long terms format")
        eq([(x["key"], x.get("key_as_string")) for x in b["aggregations"]["d"]["buckets"]],
           [(75.5, "75.5")], label + " double terms format")
        # metrics and range buckets take the same DecimalFormat
        b = search(n, "/hf/_search", {"size": 0, "aggs": {
            "a": {"avg": {"field": "price", "format": "#,##0.00"}},
            "m": {"max": {"field": "price"}},
            "s": {"stats": {"field": "number", "format": "0.0"}},
            "r": {"range": {"field": "number", "format": "#,##0.0",
                            "ranges": [{"to": 100}, {"from": 100, "to": 2000}]}}}}, label)
        aggs = b["aggregations"]
        eq(aggs["a"], {"value": 38.0, "value_as_string": "38.00"}, label + " avg format")
        eq(aggs["m"], {"value": 75.5}, label + " no format, no value_as_string")
        eq([aggs["s"].get(k) for k in ("min_as_string", "max_as_string", "sum_as_string")],
           ["1.0", "151.0", "304.0"], label + " stats format")
        eq([(x["key"], x.get("from_as_string"), x.get("to_as_string"), x["doc_count"])
            for x in aggs["r"]["buckets"]],
           [("*-100.0", None, "100.0", 2), ("100.0-2,000.0", "100.0", "2,000.0", 2)],
           label + " range format")


# ---- 10. date sorts: "format" renders sort values, search_after takes them ----

@test
def date_sort_format_and_search_after():
    docs = [("a", {"ts": "2021-10-13 00:30:04.828"}), ("b", {"ts": "2021-06-11 04:30:04.828"}),
            ("c", {"ts": "2021-02-11 08:30:04.828"})]
    nanos = [("x", {"ts": "21/08/2021 03:30:04.732"}), ("y", {"ts": "20/05/2021 05:30:04.832"}),
             ("z", {"ts": "15/04/2021 06:30:04.821123"})]
    iso = {"order": "asc", "format": "strict_date_optional_time_nanos"}

    def page(n, index, sort, after=None, size=1):
        body = {"size": size, "sort": [{"ts": sort}]}
        if after is not None:
            body["search_after"] = after
        b = search(n, "/%s/_search" % index, body, index)
        return [(h["_id"], h["sort"]) for h in b["hits"]["hits"]]

    for label, n, shards in each():
        make(n, "sf", shards, {"properties": {"ts": {"type": "date",
                                                     "format": "yyyy-MM-dd HH:mm:ss.SSS"}}}, docs)
        make(n, "sf_nanos", shards, {"properties": {"ts": {
            "type": "date_nanos", "format": "dd/MM/yyyy HH:mm:ss.SSSSSS||dd/MM/yyyy HH:mm:ss.SSS"}}},
             nanos)
        make(n, "sf_none", shards, {"properties": {"k": {"type": "keyword"}}}, [("n", {"k": "x"})])
        # without a format the values are millis; search_after takes the
        # millis or the text in the field's format
        eq(page(n, "sf", "desc"), [("a", [1634085004828])], label + " millis")
        eq(page(n, "sf", "desc", [1634085004828]), [("b", [1623385804828])], label + " after millis")
        eq(page(n, "sf", "desc", ["2021-10-13 00:30:04.828"]), [("b", [1623385804828])],
           label + " after the field's format")
        # with a format the values are text, and search_after takes that text
        eq(page(n, "sf", iso), [("c", ["2021-02-11T08:30:04.828Z"])], label + " formatted")
        eq(page(n, "sf", iso, ["2021-02-11T08:30:04.828Z"]), [("b", ["2021-06-11T04:30:04.828Z"])],
           label + " after the formatted value")
        custom = {"order": "asc", "format": "yyyy-MM-dd | HH:mm:ss.SSS"}
        eq(page(n, "sf", custom, ["2021-02-11 | 08:30:04.828"], size=2),
           [("b", ["2021-06-11 | 04:30:04.828"]), ("a", ["2021-10-13 | 00:30:04.828"])],
           label + " a custom format both ways")
        for fmt in ("yyyy-MM-dd HH:mm:ss.SSS", "epoch_millis"):
            st, b = n.req("POST", "/sf/_search", {"size": 1, "sort": [{"ts": {
                "order": "asc", "format": fmt}}], "search_after": ["2021-02-11T08:30:04.828Z"]})
            eq((st, "failed to parse date field" in str(b)), (400, True),
               "%s mismatched format %s: %s" % (label, fmt, b))
        # date_nanos: nanosecond text
        eq(page(n, "sf_nanos", iso, size=3),
           [("z", ["2021-04-15T06:30:04.821123Z"]), ("y", ["2021-05-20T05:30:04.832Z"]),
            ("x", ["2021-08-21T03:30:04.732Z"])], label + " date_nanos formatted")
        eq(page(n, "sf_nanos", iso, ["2021-04-15T06:30:04.821123Z"]),
           [("y", ["2021-05-20T05:30:04.832Z"])], label + " date_nanos after")
        eq(page(n, "sf_nanos", {"order": "asc"}, ["15/04/2021 06:30:04.821123"]),
           [("y", [1621488604832000000])], label + " date_nanos after, the field's format")
        # an index of dates and one of date_nanos in one numeric_type
        both = "sf,sf_nanos"
        b = search(n, "/%s/_search" % both, {"size": 6, "sort": [{"ts": dict(
            iso, numeric_type="date_nanos")}]}, label)
        eq([(h["_id"], h["sort"]) for h in b["hits"]["hits"]],
           [("c", ["2021-02-11T08:30:04.828Z"]), ("z", ["2021-04-15T06:30:04.821123Z"]),
            ("y", ["2021-05-20T05:30:04.832Z"]), ("b", ["2021-06-11T04:30:04.828Z"]),
            ("x", ["2021-08-21T03:30:04.732Z"]), ("a", ["2021-10-13T00:30:04.828Z"])],
           label + " numeric_type date_nanos")
        b = search(n, "/%s/_search" % both, {"size": 2, "sort": [{"ts": dict(
            iso, numeric_type="date")}], "search_after": ["2021-04-15T06:30:04.821Z"]}, label)
        eq([(h["_id"], h["sort"]) for h in b["hits"]["hits"]],
           [("z", ["2021-04-15T06:30:04.821Z"]), ("y", ["2021-05-20T05:30:04.832Z"])],
           label + " numeric_type date, after a text")
        b = search(n, "/%s/_search" % both, {"size": 6, "sort": [{"ts": {
            "order": "desc", "numeric_type": "date_nanos"}}],
            "search_after": [1618468204821123000]}, label)
        eq([(h["_id"], h["sort"]) for h in b["hits"]["hits"]],
           [("c", [1613032204828000000])], label + " numeric_type date_nanos, after nanos")
        b = search(n, "/%s/_search" % both, {"size": 6, "sort": [{"ts": {
            "order": "asc", "numeric_type": "date"}}], "search_after": [1618468204821]}, label)
        eq([h["_id"] for h in b["hits"]["hits"]], ["y", "b", "x", "a"],
           label + " numeric_type date, after millis")
        # a doc without the date: null, first or last
        make(n, "sf_missing", shards, {"properties": {"ts": {
            "type": "date", "format": "yyyy-MM-dd HH:mm:ss.SSS"}}},
             docs[:2] + [("m", {"other": 1})])
        eq(page(n, "sf_missing", dict(iso, missing="_last"), size=3),
           [("b", ["2021-06-11T04:30:04.828Z"]), ("a", ["2021-10-13T00:30:04.828Z"]),
            ("m", [None])], label + " missing last")
        eq(page(n, "sf_missing", dict(iso, missing="_first"), size=3),
           [("m", [None]), ("b", ["2021-06-11T04:30:04.828Z"]),
            ("a", ["2021-10-13T00:30:04.828Z"])], label + " missing first")
        eq(page(n, "sf_missing", {"order": "asc", "format": "epoch_millis"}, size=3),
           [("b", ["1623385804828"]), ("a", ["1634085004828"]), ("m", [None])],
           label + " epoch_millis text")
        # shards without the field (or without any doc) read the text too
        st, b = n.req("POST", "/sf,sf_none/_search", {"size": 5, "sort": [{"ts": dict(
            iso, unmapped_type="date")}], "search_after": ["2021-02-11T08:30:04.828Z"]})
        got = [(h["_id"], h["sort"]) for h in b.get("hits", {}).get("hits", [])]
        eq((st, got[:2], [i for i, _ in got]),
           (200, [("b", ["2021-06-11T04:30:04.828Z"]), ("a", ["2021-10-13T00:30:04.828Z"])],
            ["b", "a", "n"]), label + " with an unmapped index: %s" % b)


if __name__ == "__main__":
    run_tests(budget_s=400, teardown=teardown)
