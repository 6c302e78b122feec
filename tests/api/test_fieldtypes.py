"""Field types ip, date_nanos, half_float, scaled_float and unsigned_long
(issue 13), on a solo node and a 3-node static cluster: mapping errors,
document errors, term/terms/range queries, sort values, aggregations and
`fields`, each against values worked out by hand from Elasticsearch's
rules (Lucene's InetAddressPoint order, HalfFloatPoint rounding,
Math.round(value * scaling_factor), unsigned order above 2^63)."""
import ipaddress
import os
import random
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, error_is, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-fieldtypes-test-")
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


def make_index(n, name, props, docs):
    st, b = n.req("PUT", "/" + name, {
        "settings": {"number_of_shards": 3, "number_of_replicas": 0},
        "mappings": {"properties": props}})
    eq(st, 200, "create %s: %s" % (name, b))
    lines = []
    for i, d in enumerate(docs):
        lines += [{"index": {"_index": name, "_id": str(i + 1)}}, d]
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk into %s: %s" % (name, b))


def search(n, index, body):
    st, b = n.req("POST", "/%s/_search" % index, body)
    eq(st, 200, "search %s %s: %s" % (index, body, b))
    return b


def ids(b):
    return sorted(h["_id"] for h in b["hits"]["hits"])


def hits_count(n, index, query):
    return search(n, index, {"query": query, "size": 100})["hits"]["total"]["value"]


# ---- mapping errors ----

@test
def mapping_errors():
    n = solo()
    cases = [
        ({"x": {"type": "scaled_float"}}, "Field [scaling_factor] is required"),
        ({"x": {"type": "scaled_float", "scaling_factor": -1}}, "scaling_factor"),
        ({"x": {"type": "scaled_float", "scaling_factor": "abc"}}, "scaling_factor"),
        ({"x": {"type": "ip", "format": "x"}}, "unknown parameter [format]"),
        ({"x": {"type": "long", "scaling_factor": 10}}, "unknown parameter [scaling_factor]"),
        ({"x": {"type": "ip", "null_value": "300.1.1.1"}}, "null_value"),
        ({"x": {"type": "date_nanos", "format": "no_such_format"}}, "Invalid format"),
    ]
    for props, reason in cases:
        r = n.req("PUT", "/badmap", {"mappings": {"properties": props}})
        error_is(r, 400, "mapper_parsing_exception", reason)
        eq(n.req("HEAD", "/badmap")[0], 404, "no index left behind by %s" % props)
    st, b = n.req("PUT", "/goodmap", {"mappings": {"properties": {
        "p": {"type": "scaled_float", "scaling_factor": 100},
        "i": {"type": "ip"}, "n": {"type": "date_nanos"}, "h": {"type": "half_float"},
        "u": {"type": "unsigned_long"}}}})
    eq(st, 200, "good mapping")
    st, b = n.req("GET", "/goodmap/_mapping")
    eq(b["goodmap"]["mappings"]["properties"], {
        "p": {"type": "scaled_float", "scaling_factor": 100},
        "i": {"type": "ip"}, "n": {"type": "date_nanos"}, "h": {"type": "half_float"},
        "u": {"type": "unsigned_long"}}, "mapping as given")
    r = n.req("PUT", "/goodmap/_mapping", {"properties": {
        "p": {"type": "scaled_float", "scaling_factor": 10}}})
    error_is(r, 400, "illegal_argument_exception", "scaling_factor")


@test
def document_errors():
    n = solo()
    st, _ = n.req("PUT", "/docerr", {"mappings": {"properties": {
        "i": {"type": "ip"}, "n": {"type": "date_nanos"}, "h": {"type": "half_float"},
        "u": {"type": "unsigned_long"}, "p": {"type": "scaled_float", "scaling_factor": 10}}}})
    eq(st, 200, "create")
    bad = [{"i": "300.1.1.1"}, {"i": "1.2.3"}, {"i": "01.2.3.4"}, {"i": "1::2::3"},
           {"i": "fe80::1%eth0"}, {"i": 5}, {"n": "1969-12-31T23:59:59Z"},
           {"n": "2300-01-01T00:00:00Z"}, {"n": "nope"}, {"h": 70000}, {"h": "x"},
           {"u": -1}, {"u": 18446744073709551616}, {"u": "12x"}, {"p": "abc"}]
    for d in bad:
        r = n.req("PUT", "/docerr/_doc/1", d)
        error_is(r, 400, "mapper_parsing_exception", "failed to parse field")
    eq(n.req("GET", "/docerr/_doc/1")[0], 404, "nothing indexed")
    # a bulk reports the bad item alone
    st, b = n.bulk([{"index": {"_index": "docerr", "_id": "a"}}, {"i": "::1"},
                    {"index": {"_index": "docerr", "_id": "b"}}, {"i": "::g"}])
    eq([it["index"]["status"] for it in b["items"]], [201, 400], "bulk statuses")
    eq(b["items"][1]["index"]["error"]["type"], "mapper_parsing_exception", "bulk error type")


# ---- ip ----

IPS = ["192.168.1.10", "192.168.2.20", "10.0.0.1", "2001:db8::1", "0:0:0:0:0:0:0:1",
       "::ffff:10.0.0.2", "10.0.0.1"]


@test
def ip_queries_sort_aggs():
    for label, w, asks in targets():
        make_index(w, "ips", {"ip": {"type": "ip"}, "k": {"type": "keyword"}},
                   [{"ip": ip, "k": "d%d" % i} for i, ip in enumerate(IPS)])
        for n in asks:
            what = "%s via %s" % (label, n.port)
            eq(ids(search(n, "ips", {"query": {"term": {"ip": "192.168.1.10"}}})), ["1"],
               "term " + what)
            eq(ids(search(n, "ips", {"query": {"term": {"ip": "192.168.0.0/16"}}})), ["1", "2"],
               "cidr " + what)
            eq(ids(search(n, "ips", {"query": {"term": {"ip": "::ffff:192.168.2.20"}}})), ["2"],
               "mapped v6 form " + what)
            eq(ids(search(n, "ips", {"query": {"terms": {"ip": ["10.0.0.0/8", "::1"]}}})),
               ["3", "5", "6", "7"], "terms with cidr " + what)
            eq(ids(search(n, "ips", {"query": {"term": {"ip": "2001:db8::/32"}}})), ["4"],
               "v6 cidr " + what)
            eq(ids(search(n, "ips", {"query": {"range": {"ip": {
                "gte": "10.0.0.1", "lt": "192.168.2.20"}}}})), ["1", "3", "6", "7"],
               "range " + what)
            eq(ids(search(n, "ips", {"query": {"range": {"ip": {"gt": "10.0.0.1"}}}})),
               ["1", "2", "4", "6"], "open range " + what)
            eq(ids(search(n, "ips", {"query": {"match": {"ip": "10.0.0.2"}}})), ["6"],
               "match " + what)
            b = search(n, "ips", {"query": {"term": {"ip": "10.0.0.1"}}})
            eq([h["_score"] for h in b["hits"]["hits"]], [1.0, 1.0], "constant score " + what)
            b = search(n, "ips", {"sort": [{"ip": "asc"}, {"k": "asc"}], "size": 10})
            eq([h["sort"][0] for h in b["hits"]["hits"]],
               ["::1", "10.0.0.1", "10.0.0.1", "10.0.0.2", "192.168.1.10", "192.168.2.20",
                "2001:db8::1"], "sort asc " + what)
            b = search(n, "ips", {"sort": [{"ip": "desc"}, {"k": "asc"}], "size": 2,
                                  "search_after": ["192.168.1.10", "d0"]})
            eq([h["sort"][0] for h in b["hits"]["hits"]], ["10.0.0.2", "10.0.0.1"],
               "search_after desc " + what)
            b = search(n, "ips", {"size": 0, "aggs": {"t": {"terms": {"field": "ip"}}}})
            eq([(x["key"], x["doc_count"]) for x in b["aggregations"]["t"]["buckets"]],
               [("10.0.0.1", 2), ("::1", 1), ("10.0.0.2", 1), ("192.168.1.10", 1),
                ("192.168.2.20", 1), ("2001:db8::1", 1)], "terms agg " + what)
            b = search(n, "ips", {"query": {"ids": {"values": ["5", "6"]}},
                                  "fields": ["ip"], "docvalue_fields": ["ip"], "sort": ["k"]})
            eq([h["fields"]["ip"] for h in b["hits"]["hits"]], [["::1"], ["10.0.0.2"]],
               "fields " + what)
            eq([h["_source"]["ip"] for h in b["hits"]["hits"]],
               ["0:0:0:0:0:0:0:1", "::ffff:10.0.0.2"], "_source as sent " + what)
            b = search(n, "ips", {"query": {"ids": {"values": ["7"]}},
                                  "docvalue_fields": ["ip"], "_source": False})
            eq(b["hits"]["hits"][0]["fields"]["ip"], ["10.0.0.1"], "docvalue_fields " + what)
            r = n.req("POST", "/ips/_search", {"query": {"term": {"ip": "not-an-ip"}}})
            eq(r[0], 400, "bad ip in a query " + what)
            eq("is not an IP string literal" in str(r[1]), True, "reason " + what + str(r[1]))
            r = n.req("POST", "/ips/_search", {"query": {"term": {"ip": "10.0.0.0/33"}}})
            eq(r[0], 400, "bad prefix length " + what)
            r = n.req("POST", "/ips/_search", {"aggs": {"s": {"sum": {"field": "ip"}}}})
            eq(r[0], 400, "sum on ip " + what)


def ip_key(a):
    """Lucene's order: IPv4 as ::ffff:a.b.c.d, then the 16 bytes."""
    a = ipaddress.ip_address(a)
    if a.version == 4:
        a = ipaddress.IPv6Address("::ffff:" + str(a))
    return a.packed


def es_text(a):
    a = ipaddress.ip_address(a)
    if a.version == 6 and a.ipv4_mapped:
        return str(a.ipv4_mapped)
    return str(a)


@test
def ip_multi_valued():
    for label, w, asks in targets():
        make_index(w, "ipmv", {"ip": {"type": "ip"}},
                   [{"ip": ["10.0.0.2", "9.0.0.1", "::1", "10.0.0.2", "2001:db8::1"]}])
        for n in asks:
            b = search(n, "ipmv", {"docvalue_fields": ["ip"], "fields": [], "_source": False})
            eq(b["hits"]["hits"][0]["fields"]["ip"], ["::1", "9.0.0.1", "10.0.0.2", "2001:db8::1"],
               "docvalue_fields: a sorted set in address order on " + label)
            b = search(n, "ipmv", {"query": {"term": {"ip": "9.0.0.0/8"}},
                                   "sort": [{"ip": {"order": "desc"}}]})
            eq(b["hits"]["hits"][0]["sort"], ["2001:db8::1"], "desc sorts by the largest")


@test
def ip_model():
    """Random addresses and CIDR/range queries against Python's ipaddress."""
    rnd = random.Random(13)
    addrs = []
    for i in range(300):
        r = rnd.random()
        if r < 0.5:
            a = ipaddress.IPv4Address(rnd.choice([10, 172, 192, 8]) << 24 | rnd.getrandbits(24))
        elif r < 0.8:
            a = ipaddress.IPv6Address(0x20010db8 << 96 | rnd.getrandbits(rnd.choice([16, 64, 96])))
        else:
            a = ipaddress.IPv6Address(rnd.getrandbits(128))
        addrs.append(str(a) if rnd.random() < 0.7 else a.exploded)
    for label, w, asks in targets():
        make_index(w, "ipm", {"ip": {"type": "ip"}}, [{"ip": a} for a in addrs])
        n = asks[-1]
        for q in range(40):
            base = ipaddress.ip_address(rnd.choice(addrs))
            plen = rnd.randint(0, base.max_prefixlen)
            net = ipaddress.ip_network("%s/%d" % (base, plen), strict=False)
            cidr = "%s/%d" % (base, plen)
            want = sorted(str(i + 1) for i, a in enumerate(addrs)
                          if ipaddress.ip_address(a).version == net.version and
                          ipaddress.ip_address(a) in net)
            b = search(n, "ipm", {"query": {"term": {"ip": cidr}}, "size": 400, "_source": False})
            eq(ids(b), want, "%s cidr %s on %s" % (q, cidr, label))
            lo, hi = sorted(rnd.sample(addrs, 2), key=ip_key)
            want = sorted(str(i + 1) for i, a in enumerate(addrs)
                          if ip_key(lo) < ip_key(a) <= ip_key(hi))
            b = search(n, "ipm", {"query": {"range": {"ip": {"gt": lo, "lte": hi}}},
                                  "size": 400, "_source": False})
            eq(ids(b), want, "%s range (%s, %s] on %s" % (q, lo, hi, label))
        b = search(n, "ipm", {"sort": [{"ip": "asc"}], "size": 400, "_source": False})
        eq([h["sort"][0] for h in b["hits"]["hits"]],
           [es_text(a) for a in sorted(addrs, key=ip_key)], "sort order on " + label)


# ---- date_nanos ----

NANOS = ["2024-01-01T00:00:00.123456789Z", "2024-01-01T00:00:00.123456788Z",
         "2024-01-01T00:00:00.123Z", 1704067200000, "2024-01-01T01:00:00.5+01:00"]


@test
def date_nanos():
    for label, w, asks in targets():
        make_index(w, "nanos", {"t": {"type": "date_nanos"}}, [{"t": v} for v in NANOS])
        for n in asks:
            what = "%s via %s" % (label, n.port)
            eq(ids(search(n, "nanos", {"query": {"range": {"t": {
                "gt": "2024-01-01T00:00:00.123456788Z", "lt": "2024-01-01T00:00:00.2Z"}}}})),
               ["1"], "gt keeps nanos " + what)
            eq(ids(search(n, "nanos", {"query": {"range": {"t": {
                "gte": "2024-01-01T00:00:00.123Z", "lt": "2024-01-01T00:00:00.123456789Z"}}}})),
               ["2", "3"], "range " + what)
            eq(ids(search(n, "nanos", {"query": {"term": {
                "t": "2024-01-01T00:00:00.123456789Z"}}})), ["1"], "term " + what)
            eq(ids(search(n, "nanos", {"query": {"range": {"t": {"lte": "2024-01-01"}}}})),
               ["1", "2", "3", "4", "5"], "lte a day rounds up " + what)
            b = search(n, "nanos", {"sort": [{"t": "asc"}], "fields": ["t"]})
            eq([h["sort"][0] for h in b["hits"]["hits"]],
               [1704067200000000000, 1704067200123000000, 1704067200123456788,
                1704067200123456789, 1704067200500000000], "sort values in nanos " + what)
            eq([h["fields"]["t"][0] for h in b["hits"]["hits"]],
               ["2024-01-01T00:00:00.000Z", "2024-01-01T00:00:00.123Z",
                "2024-01-01T00:00:00.123456788Z", "2024-01-01T00:00:00.123456789Z",
                "2024-01-01T00:00:00.500Z"], "fields " + what)
            b = search(n, "nanos", {"size": 0, "aggs": {"h": {"date_histogram": {
                "field": "t", "fixed_interval": "100ms"}}, "mx": {"max": {"field": "t"}}}})
            eq([(x["key_as_string"], x["doc_count"])
                for x in b["aggregations"]["h"]["buckets"] if x["doc_count"]],
               [("2024-01-01T00:00:00.000Z", 1), ("2024-01-01T00:00:00.100Z", 3),
                ("2024-01-01T00:00:00.500Z", 1)], "date_histogram " + what)
            eq(b["aggregations"]["mx"]["value"], 1704067200500.0, "max in millis " + what)


# ---- half_float and scaled_float ----

@test
def half_and_scaled_float():
    for label, w, asks in targets():
        make_index(w, "floats", {"h": {"type": "half_float"},
                                 "p": {"type": "scaled_float", "scaling_factor": 100}},
                   [{"h": 0.1, "p": 1.234}, {"h": 1.5, "p": 2.5}, {"h": 65504, "p": "10"},
                    {"h": "2049", "p": -0.015}])
        for n in asks:
            what = "%s via %s" % (label, n.port)
            b = search(n, "floats", {"sort": [{"h": "asc"}], "fields": ["h", "p"]})
            # 0.1 is held as the nearest half, 2^-4 * 1638/1024; 2049 rounds to even 2048
            eq([h["sort"][0] for h in b["hits"]["hits"]], [0.0999755859375, 1.5, 2048.0, 65504.0],
               "half sort values " + what)
            eq([h["_source"]["h"] for h in b["hits"]["hits"]], [0.1, 1.5, "2049", 65504],
               "half _source as sent " + what)
            eq(ids(search(n, "floats", {"query": {"term": {"h": 0.1}}})), ["1"],
               "half term rounds the value " + what)
            # ES: gte 0.1 starts at the first half >= 0.1f, above the stored 0.0999755859375
            eq(ids(search(n, "floats", {"query": {"range": {"h": {"gte": 0.1, "lte": 2048}}}})),
               ["2", "4"], "half range " + what)
            eq(ids(search(n, "floats", {"query": {"range": {"h": {"gt": 2048}}}})), ["3"],
               "half gt " + what)
            b = search(n, "floats", {"sort": [{"p": "desc"}], "fields": ["p"]})
            eq([h["sort"][0] for h in b["hits"]["hits"]], [10.0, 2.5, 1.23, -0.01],
               "scaled sort values (Math.round(-1.5) is -1) " + what)
            eq([h["fields"]["p"][0] for h in b["hits"]["hits"]], [10.0, 2.5, 1.23, -0.01],
               "scaled fields " + what)
            eq([h["_source"]["p"] for h in b["hits"]["hits"]], ["10", 2.5, 1.234, -0.015],
               "scaled _source as sent " + what)
            eq(ids(search(n, "floats", {"query": {"term": {"p": 1.234}}})), ["1"],
               "scaled term rounds " + what)
            eq(ids(search(n, "floats", {"query": {"term": {"p": 1.23}}})), ["1"],
               "scaled term at the stored value " + what)
            eq(ids(search(n, "floats", {"query": {"range": {"p": {"gt": 1.23}}}})), ["2", "3"],
               "scaled gt " + what)
            eq(ids(search(n, "floats", {"query": {"range": {"p": {"gte": 1.225, "lt": 2.5}}}})),
               ["1"], "scaled range " + what)
            b = search(n, "floats", {"size": 0, "aggs": {
                "s": {"sum": {"field": "p"}}, "mx": {"max": {"field": "h"}},
                "t": {"terms": {"field": "p", "order": {"_key": "asc"}}}}})
            eq(round(b["aggregations"]["s"]["value"], 9), 13.72, "scaled sum " + what)
            eq(b["aggregations"]["mx"]["value"], 65504.0, "half max " + what)
            eq([x["key"] for x in b["aggregations"]["t"]["buckets"]], [-0.01, 1.23, 2.5, 10.0],
               "scaled terms keys " + what)


def half(x):
    """Python's struct 'e' rounds to the nearest half, ties to even."""
    return struct.unpack("<e", struct.pack("<e", x))[0]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


@test
def half_float_model():
    """Stored values and range bounds against struct's half floats and
    Lucene's HalfFloatPoint rule (a bound moves to the nearest half inside)."""
    rnd = random.Random(7)
    vals = [round(rnd.uniform(-3000, 3000), rnd.choice([0, 1, 3, 6])) for _ in range(150)]
    for label, w, asks in targets():
        make_index(w, "halfm", {"h": {"type": "half_float"}}, [{"h": v} for v in vals])
        n = asks[0]
        b = search(n, "halfm", {"sort": [{"h": "asc"}], "size": 200, "_source": False})
        eq([h["sort"][0] for h in b["hits"]["hits"]], sorted(half(f32(v)) for v in vals),
           "stored halves on " + label)
        for q in range(25):
            lo, hi = sorted([round(rnd.uniform(-3000, 3000), 2) for _ in range(2)])
            incl_lo, incl_hi = rnd.random() < 0.5, rnd.random() < 0.5
            lo_f, hi_f = f32(lo), f32(hi)
            want = sorted(str(i + 1) for i, v in enumerate(vals)
                          if (half(f32(v)) >= lo_f if incl_lo else half(f32(v)) > lo_f) and
                          (half(f32(v)) <= hi_f if incl_hi else half(f32(v)) < hi_f))
            rq = {("gte" if incl_lo else "gt"): lo, ("lte" if incl_hi else "lt"): hi}
            b = search(n, "halfm", {"query": {"range": {"h": rq}}, "size": 200, "_source": False})
            eq(ids(b), want, "%d range %s on %s" % (q, rq, label))


# ---- unsigned_long ----

U = [0, 1, 9223372036854775807, 9223372036854775808, 18446744073709551615, "18446744073709551614"]


@test
def unsigned_long():
    for label, w, asks in targets():
        make_index(w, "ulong", {"u": {"type": "unsigned_long"}}, [{"u": v} for v in U])
        for n in asks:
            what = "%s via %s" % (label, n.port)
            b = search(n, "ulong", {"sort": [{"u": "desc"}], "fields": ["u"]})
            eq([h["sort"][0] for h in b["hits"]["hits"]],
               [18446744073709551615, 18446744073709551614, 9223372036854775808,
                9223372036854775807, 1, 0], "sort desc above 2^63 " + what)
            eq([h["_id"] for h in b["hits"]["hits"]], ["5", "6", "4", "3", "2", "1"],
               "order " + what)
            eq(ids(search(n, "ulong", {"query": {"range": {"u": {
                "gte": "9223372036854775808"}}}})), ["4", "5", "6"], "range above 2^63 " + what)
            eq(ids(search(n, "ulong", {"query": {"range": {"u": {
                "gt": "9223372036854775807", "lt": "18446744073709551615"}}}})), ["4", "6"],
               "exclusive bounds " + what)
            eq(ids(search(n, "ulong", {"query": {"term": {"u": "18446744073709551615"}}})),
               ["5"], "term max " + what)
            eq(ids(search(n, "ulong", {"query": {"terms": {"u": [0, "9223372036854775808"]}}})),
               ["1", "4"], "terms " + what)
            # JSON numbers above 2^53 are read from their text: exact too
            eq(ids(search(n, "ulong", {"query": {"term": {"u": 18446744073709551614}}})),
               ["6"], "term as a JSON number " + what)
            eq(ids(search(n, "ulong", {"query": {"range": {"u": {
                "gt": 9223372036854775807, "lte": 18446744073709551614}}}})), ["4", "6"],
               "range with JSON numbers " + what)
            b = search(n, "ulong", {"sort": [{"u": "desc"}], "size": 1,
                                    "search_after": [18446744073709551614]})
            eq([h["_id"] for h in b["hits"]["hits"]], ["4"], "exact search_after " + what)
            st, b = n.req("POST", "/_msearch", '{"index":"ulong"}\n' +
                          '{"query":{"term":{"u":9223372036854775809}}}\n',
                          {"Content-Type": "application/x-ndjson"})
            eq(b["responses"][0]["hits"]["total"]["value"], 0, "_msearch exact " + what)
            eq(ids(search(n, "ulong", {"query": {"range": {"u": {"lt": 1}}}})), ["1"],
               "lt 1 " + what)
            b = search(n, "ulong", {"sort": [{"u": "asc"}], "size": 2,
                                    "search_after": ["9223372036854775807"]})
            eq([h["_id"] for h in b["hits"]["hits"]], ["4", "6"], "search_after " + what)
            b = search(n, "ulong", {"sort": [{"u": "desc"}], "size": 1,
                                    "search_after": [18446744073709551615]})
            eq([h["_id"] for h in b["hits"]["hits"]], ["6"], "search_after the max " + what)
            r = n.req("POST", "/ulong/_search", {"sort": [{"u": "asc"}],
                                                 "search_after": ["-5"]})
            eq(r[0], 400, "negative search_after " + what)
            b = search(n, "ulong", {"size": 0, "aggs": {"mx": {"max": {"field": "u"}},
                                                        "mn": {"min": {"field": "u"}},
                                                        "t": {"terms": {"field": "u"}}}})
            eq([x["key"] for x in b["aggregations"]["t"]["buckets"]],
               [0, 1, 9223372036854775807, 9223372036854775808, 18446744073709551614,
                18446744073709551615], "terms keys exact, in unsigned order " + what)
            eq((b["aggregations"]["mx"]["value"], b["aggregations"]["mn"]["value"]),
               (1.8446744073709552e19, 0.0), "max/min as doubles " + what)
            b = search(n, "ulong", {"query": {"ids": {"values": ["4", "5", "6"]}},
                                    "fields": ["u"], "sort": ["u"]})
            eq([h["fields"]["u"] for h in b["hits"]["hits"]],
               [[9223372036854775808], [18446744073709551614], [18446744073709551615]],
               "fields exact (numbers and strings in _source) " + what)


@test
def long_values_above_2_53_in_queries():
    for label, w, asks in targets():
        make_index(w, "bigl", {"l": {"type": "long"}},
                   [{"l": 9007199254740992}, {"l": 9007199254740993}, {"l": -9007199254740995}])
        for n in asks:
            what = "%s via %s" % (label, n.port)
            eq(ids(search(n, "bigl", {"query": {"term": {"l": 9007199254740993}}})), ["2"],
               "term " + what)
            eq(ids(search(n, "bigl", {"query": {"range": {"l": {"lt": -9007199254740994}}}})),
               ["3"], "negative range " + what)
            b = search(n, "bigl", {"sort": [{"l": "asc"}], "search_after": [9007199254740992]})
            eq([h["sort"][0] for h in b["hits"]["hits"]], [9007199254740993],
               "search_after " + what)
            b = search(n, "bigl", {"query": {"term": {"l": 9007199254740993}}, "fields": ["l"]})
            eq(b["hits"]["hits"][0]["fields"]["l"], [9007199254740993], "fields exact " + what)


# ---- _source mapping options ----

@test
def source_disabled():
    for label, w, asks in targets():
        st, b = w.req("PUT", "/nosrc", {
            "settings": {"number_of_shards": 2, "number_of_replicas": 0},
            "mappings": {"_source": {"enabled": False},
                         "properties": {"k": {"type": "keyword"}, "t": {"type": "text"}}}})
        eq(st, 200, "create " + label)
        eq(w.req("PUT", "/nosrc/_doc/1", {"k": "v", "t": "hello world"})[0], 201, "index")
        for n in asks:
            what = "%s via %s" % (label, n.port)
            st, b = n.req("GET", "/nosrc/_doc/1")  # realtime, before any refresh
            eq((st, b["found"], "_source" in b), (200, True, False), "realtime GET " + what)
        w.refresh("nosrc")
        for n in asks:
            what = "%s via %s" % (label, n.port)
            st, b = n.req("GET", "/nosrc/_doc/1")
            eq((st, b["found"], b["_version"], "_source" in b), (200, True, 1, False),
               "GET " + what)
            b = search(n, "nosrc", {"query": {"match": {"t": "world"}}})
            eq([(h["_id"], "_source" in h) for h in b["hits"]["hits"]], [("1", False)],
               "still indexed, no _source in hits " + what)
            # fields read _source: refused naming the index, as ES 7.10
            error_is(n.req("POST", "/nosrc/_search",
                           {"query": {"term": {"k": "v"}}, "fields": ["k"]}), 400,
                     "illegal_argument_exception",
                     "since _source is disabled in the mappings for index [nosrc]")
            error_is(n.req("GET", "/nosrc/_source/1"), 404, "resource_not_found_exception")
            error_is(n.req("POST", "/nosrc/_update/1", {"doc": {"k": "w"}}), 400,
                     "document_source_missing_exception", "document source missing")
            st, b = n.req("GET", "/nosrc/_mapping")
            eq(b["nosrc"]["mappings"]["_source"], {"enabled": False}, "mapping " + what)
        error_is(w.req("PUT", "/nosrc/_mapping", {"_source": {"enabled": True}}), 400,
                 "illegal_argument_exception", "Cannot update parameter [enabled]")
        eq(w.req("PUT", "/nosrc/_mapping", {"_source": {"enabled": False}})[0], 200,
           "repeating the same _source is fine")
        error_is(w.req("PUT", "/nosrc2", {"mappings": {"_source": {"enable": False}}}), 400,
                 "mapper_parsing_exception", "unknown parameter [enable]")
        error_is(w.req("PUT", "/nosrc2", {"mappings": {"_source": {"includes": [1]}}}), 400,
                 "mapper_parsing_exception")
        eq(w.req("HEAD", "/nosrc2")[0], 404, "nothing created")


@test
def source_includes_excludes():
    for label, w, asks in targets():
        st, b = w.req("PUT", "/srcf", {
            "settings": {"number_of_shards": 2, "number_of_replicas": 0},
            "mappings": {"_source": {"includes": ["a", "meta.*", "secret*"],
                                     "excludes": ["secret*", "meta.raw"]}}})
        eq(st, 200, "create " + label)
        doc = {"a": 1, "b": 2, "secret_x": "s", "meta": {"raw": "r", "k": "v"}}
        eq(w.req("PUT", "/srcf/_doc/1", doc)[0], 201, "index")
        for n in asks:
            st, b = n.req("GET", "/srcf/_doc/1")
            eq(b["_source"], {"a": 1, "meta": {"k": "v"}}, "realtime GET filtered")
        w.refresh("srcf")
        for n in asks:
            what = "%s via %s" % (label, n.port)
            st, b = n.req("GET", "/srcf/_doc/1")
            eq(b["_source"], {"a": 1, "meta": {"k": "v"}}, "GET filtered " + what)
            eq(n.req("GET", "/srcf/_source/1")[1], {"a": 1, "meta": {"k": "v"}}, "_source " + what)
            for q in ({"match": {"secret_x": "s"}}, {"term": {"b": 2}},
                      {"match": {"meta.raw": "r"}}):
                b = search(n, "srcf", {"query": q})
                eq([h["_source"] for h in b["hits"]["hits"]], [{"a": 1, "meta": {"k": "v"}}],
                   "excluded fields stay indexed: %s %s" % (q, what))
            st, b = n.req("GET", "/srcf/_mapping")
            eq(b["srcf"]["mappings"]["_source"], {"includes": ["a", "meta.*", "secret*"],
                                                  "excludes": ["secret*", "meta.raw"]},
               "mapping " + what)
        # an update works on what was stored, as in ES
        st, b = w.req("POST", "/srcf/_update/1?refresh=true", {"doc": {"c": 3, "a": 5}})
        eq(st, 200, "update %s" % b)
        eq(w.req("GET", "/srcf/_doc/1")[1]["_source"], {"a": 5, "meta": {"k": "v"}},
           "update of the stored source, filtered again")
        error_is(w.req("PUT", "/srcf/_mapping", {"_source": {
            "includes": ["a", "meta.*", "secret*"], "excludes": ["x"]}}), 400,
                 "illegal_argument_exception", "Cannot update parameter [excludes]")



@test
def field_caps():
    """_field_caps as ES 7.10 answers it: types per field, multi-fields and
    object paths, searchable/aggregatable from index/doc_values, a field of
    two types across indices listing its indices, mixed flags, unmapped
    fields with include_unmapped, metadata fields, and the errors."""
    for label, w, asks in targets():
        for name, props in (("fc-a-" + label, {
                "t": {"type": "text", "fields": {"kw": {"type": "keyword"}}},
                "n": {"type": "integer", "index": False},
                "o": {"properties": {"x": {"type": "keyword", "doc_values": False}}},
                "addr": {"type": "ip"}, "blob": {"type": "binary"}}),
                ("fc-b-" + label, {"t": {"type": "keyword"}, "n": {"type": "integer"}})):
            st, b = w.req("PUT", "/" + name, {"settings": {"number_of_shards": 2,
                                                          "number_of_replicas": 0},
                                             "mappings": {"properties": props}})
            eq(st, 200, "create %s: %s" % (name, b))
        a, b2 = "fc-a-" + label, "fc-b-" + label
        for n in asks:
            st, b = n.req("GET", "/%s/_field_caps?fields=*" % a)
            eq(st, 200, "%s field_caps: %s" % (label, b))
            f = b["fields"]
            eq(b["indices"], [a], label)
            eq(f["t"], {"text": {"type": "text", "searchable": True, "aggregatable": False}}, label)
            eq(f["t.kw"]["keyword"]["aggregatable"], True, label)
            eq(f["n"]["integer"], {"type": "integer", "searchable": False, "aggregatable": True},
               label)
            eq(f["o"]["object"]["searchable"], False, label)
            eq(f["o.x"]["keyword"], {"type": "keyword", "searchable": True,
                                     "aggregatable": False}, label)
            eq(f["addr"]["ip"]["aggregatable"], True, label)
            eq(f["blob"]["binary"], {"type": "binary", "searchable": False,
                                     "aggregatable": False}, label)
            eq(f["_id"]["_id"]["searchable"], True, label)
            eq(f["_source"]["_source"]["aggregatable"], False, label)
            # two indices: t has two types, n mixed flags, addr unmapped in b
            st, b = n.req("POST", "/%s,%s/_field_caps?include_unmapped=true" % (a, b2),
                          {"fields": ["t", "n", "addr"]})
            eq(st, 200, "%s field_caps: %s" % (label, b))
            f = b["fields"]
            eq(sorted(b["indices"]), sorted([a, b2]), label)
            eq(f["t"]["text"]["indices"], [a], label)
            eq(f["t"]["keyword"]["indices"], [b2], label)
            eq(f["n"]["integer"], {"type": "integer", "searchable": False, "aggregatable": True,
                                   "non_searchable_indices": [a]}, label)
            eq(f["addr"]["unmapped"]["indices"], [b2], label)
            eq(sorted(f), ["addr", "n", "t"], label)
            st, b = n.req("GET", "/%s/_field_caps?fields=o.*,nothing*" % a)
            eq((st, sorted(b["fields"])), (200, ["o.x"]), label)
            st, b = n.req("GET", "/%s/_field_caps" % a)
            error_is((st, b), 400, "illegal_argument_exception")
            st, b = n.req("GET", "/fc-nope/_field_caps?fields=*")
            error_is((st, b), 404, "index_not_found_exception")
            st, b = n.req("POST", "/%s/_field_caps" % a, {"fields": 7})
            error_is((st, b), 400, "illegal_argument_exception")


@test
def field_meta():
    for label, n, nodes in targets():
        st, b = n.req("PUT", "/meta-a", {"settings": {"number_of_shards": 2,
                                                      "number_of_replicas": 0},
                                         "mappings": {"properties": {
                                             "lat": {"type": "long",
                                                     "meta": {"unit": "ms", "metric": "p99"}},
                                             "t": {"type": "text"}}}})
        eq(st, 200, label + " create with meta: %s" % b)
        n.req("PUT", "/meta-b", {"mappings": {"properties": {
            "lat": {"type": "long", "meta": {"unit": "s"}}}}})
        for m in nodes:
            st, b = m.req("GET", "/meta-a/_mapping")
            eq(b["meta-a"]["mappings"]["properties"]["lat"]["meta"],
               {"unit": "ms", "metric": "p99"}, label + " meta shown")
            st, b = m.req("GET", "/meta-*/_field_caps?fields=lat,t")
            eq(b["fields"]["lat"]["long"]["meta"], {"unit": ["ms", "s"], "metric": ["p99"]},
               label + " field caps gathers meta over indices")
            eq("meta" in b["fields"]["t"]["text"], False, label + " no meta, none shown")
        st, b = n.req("PUT", "/meta-a/_mapping", {"properties": {
            "lat": {"type": "long", "meta": {"unit": "us"}}}})
        eq(st, 200, label + " meta may change: %s" % b)
        st, b = n.req("PUT", "/meta-a/_mapping", {"properties": {"t": {"type": "text"}}})
        st, b = n.req("GET", "/meta-a/_mapping")
        eq(b["meta-a"]["mappings"]["properties"]["lat"]["meta"], {"unit": "us"},
           label + " changed; a change without meta keeps it")
        for bad, why in (({"a": 1}, "[meta] values can only be strings"),
                         ({"k%d" % i: "v" for i in range(6)},
                          "[meta] can't have more than 5 entries"),
                         ({"x" * 21: "v"}, "[meta] keys can't be longer than 20 chars"),
                         ({"k": "v" * 51}, "[meta] values can't be longer than 50 chars"),
                         ("str", "[meta] must be an object")):
            error_is(n.req("PUT", "/meta-bad", {"mappings": {"properties": {
                "f": {"type": "keyword", "meta": bad}}}}), 400, "mapper_parsing_exception", why)
        # index_filter: the indices where the filter matches a document
        n.req("PUT", "/meta-a/_doc/1?refresh=true", {"lat": 5})
        n.req("PUT", "/meta-b/_doc/1?refresh=true", {"lat": 50})
        st, b = n.req("POST", "/meta-*/_field_caps?fields=lat",
                      {"index_filter": {"range": {"lat": {"gte": 10}}}})
        eq((st, b["indices"]), (200, ["meta-b"]), label + " index_filter")
        eq("meta" in b["fields"]["lat"]["long"], True, label + " filtered caps")
        error_is(n.req("POST", "/meta-*/_field_caps?fields=lat", {"index_filter": 3}), 400,
                 "parsing_exception")
        error_is(n.req("POST", "/meta-*/_field_caps?fields=lat",
                       {"index_filter": {"bogus": {}}}), 400, "parsing_exception")
        n.req("DELETE", "/meta-a,meta-b")


# ---- geo_point ----

def haversine(lat1, lon1, lat2, lon2):
    import math
    r = 6371008.7714  # ES GeoUtils.EARTH_MEAN_RADIUS
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * r * math.asin(min(1.0, math.sqrt(a)))


def geohash_center(h):
    b32 = "0123456789bcdefghjkmnpqrstuvwxyz"
    la, lo, even = [-90.0, 90.0], [-180.0, 180.0], True
    for ch in h:
        v = b32.index(ch)
        for bit in range(4, -1, -1):
            r = lo if even else la
            mid = (r[0] + r[1]) / 2
            if v & (1 << bit):
                r[0] = mid
            else:
                r[1] = mid
            even = not even
    return (la[0] + la[1]) / 2, (lo[0] + lo[1]) / 2


NYC_HASH = "dr5regw3pg6f"
CITIES = {  # name: (lat, lon), each written in another of ES's forms below
    "ams": (52.37, 4.89), "par": (48.85, 2.35), "ber": (52.52, 13.40),
    "lon": (51.5, -0.12), "nyc": geohash_center(NYC_HASH), "syd": (-33.87, 151.21),
    "fiji": (-17.7, 178.0), "samoa": (-13.8, -172.1)}


@test
def geo_point():
    forms = {"ams": lambda la, lo: {"lat": la, "lon": lo},
             "par": lambda la, lo: "%s,%s" % (la, lo),
             "ber": lambda la, lo: [lo, la],
             "lon": lambda la, lo: "POINT (%s %s)" % (lo, la),
             "nyc": lambda la, lo: NYC_HASH,  # a geohash near 40.71,-74.0
             "syd": lambda la, lo: {"lat": str(la), "lon": str(lo)},
             "fiji": lambda la, lo: [lo, la, 12.5],  # z dropped
             "samoa": lambda la, lo: ["%s,%s" % (la, lo)]}
    docs = [{"name": n, "loc": forms[n](*CITIES[n])} for n in CITIES]
    docs.append({"name": "two", "loc": [{"lat": 52.37, "lon": 4.89}, "-33.87,151.21"]})
    docs.append({"name": "none"})
    for label, n, nodes in targets():
        make_index(n, "geo", {"loc": {"type": "geo_point"}, "name": {"type": "keyword"},
                              "alt": {"type": "geo_point", "ignore_malformed": True}}, docs)
        for m in nodes:
            def names(q):
                b = search(m, "geo", {"query": q, "size": 50, "_source": ["name"]})
                return sorted(h["_source"]["name"] for h in b["hits"]["hits"])
            # distances worked out with ES's haversine
            for km in (100, 500, 1000, 20000):
                want = sorted(c for c, (la, lo) in CITIES.items()
                              if haversine(52.37, 4.89, la, lo) <= km * 1000)
                if km >= 100:
                    want = sorted(want + ["two"])
                eq(names({"geo_distance": {"distance": "%dkm" % km, "loc": "52.37,4.89"}}), want,
                   label + " geo_distance %d km" % km)
            eq(names({"geo_distance": {"distance": "300mi", "loc": [4.89, 52.37]}}),
               sorted([c for c, (la, lo) in CITIES.items()
                       if haversine(52.37, 4.89, la, lo) <= 300 * 1609.344] + ["two"]),
               label + " miles")
            box = {"top_left": {"lat": 53, "lon": -1}, "bottom_right": "48,5"}
            eq(names({"geo_bounding_box": {"loc": box}}), ["ams", "lon", "par", "two"],
               label + " bounding box")
            eq(names({"geo_bounding_box": {"loc": {"top": 53, "left": -1, "bottom": 48,
                                                   "right": 5}}}),
               ["ams", "lon", "par", "two"], label + " box by edges")
            eq(names({"geo_bounding_box": {"loc": {"wkt": "BBOX (-1, 5, 53, 48)"}}}),
               ["ams", "lon", "par", "two"], label + " WKT box")
            eq(names({"geo_bounding_box": {"loc": {"top_left": "-10,170",
                                                   "bottom_right": "-20,-170"}}}),
               ["fiji", "samoa"], label + " a box across the dateline")
            eq(names({"bool": {"filter": [{"geo_distance": {"distance": "20000km",
                                                            "loc": "0,0"}}],
                               "must_not": [{"exists": {"field": "loc"}}]}}),
               [], label + " exists")
            eq(names({"geo_bounding_box": {"nothing": box}}), [], label + " absent field")
            # sort by distance from Berlin, in km
            b = search(m, "geo", {"size": 20, "_source": ["name"],
                                  "sort": [{"_geo_distance": {"loc": [13.40, 52.52],
                                                              "unit": "km"}}]})
            got = [(h["_source"]["name"], h["sort"][0]) for h in b["hits"]["hits"]]
            want = sorted(((c, haversine(52.52, 13.40, la, lo) / 1000)
                           for c, (la, lo) in CITIES.items()), key=lambda x: x[1])
            want_two = haversine(52.52, 13.40, 52.37, 4.89) / 1000
            want = sorted(want + [("two", want_two)], key=lambda x: (x[1], x[0]))
            eq([g[0] for g in got[:-1]], [w[0] for w in want], label + " sort order")
            for (gn, gd), (wn, wd) in zip(got, want):
                eq(abs(gd - wd) < 0.01, True, label + " distance of %s: %s vs %s" % (gn, gd, wd))
            eq((got[-1][0], got[-1][1]), ("none", None), label + " no point sorts last")
            b = search(m, "geo", {"size": 1, "sort": [{"_geo_distance": {
                "loc": "52.37,4.89", "order": "desc", "mode": "max"}}], "_source": ["name"]})
            eq(b["hits"]["hits"][0]["_source"]["name"], "syd", label + " farthest first")
            # fields and docvalue_fields
            b = search(m, "geo", {"query": {"term": {"name": "par"}}, "_source": False,
                                  "fields": ["loc"]})
            eq(b["hits"]["hits"][0]["fields"]["loc"],
               [{"type": "Point", "coordinates": [2.35, 48.85]}], label + " fields GeoJSON")
            b = search(m, "geo", {"query": {"term": {"name": "par"}}, "_source": False,
                                  "docvalue_fields": ["loc"]})
            dv = b["hits"]["hits"][0]["fields"]["loc"][0]
            eq(abs(dv["lat"] - 48.85) < 1e-6 and abs(dv["lon"] - 2.35) < 1e-6, True,
               label + " docvalue_fields: %s" % dv)
            b = search(m, "geo", {"size": 0, "aggs": {"c": {"value_count": {"field": "loc"}}}})
            eq(b["aggregations"]["c"]["value"], 10, label + " value_count")
            st, b = m.req("GET", "/geo/_field_caps?fields=loc")
            eq(b["fields"]["loc"]["geo_point"]["type"], "geo_point", label + " field caps")
            # what ES refuses
            for body, why in (({"query": {"term": {"loc": "1,2"}}},
                               "Geometry fields do not support exact searching"),
                              ({"sort": [{"loc": "asc"}]}, "can't sort on geo_point field"),
                              ({"aggs": {"t": {"terms": {"field": "loc"}}}},
                               "is not supported for aggregation [terms]"),
                              ({"query": {"geo_distance": {"loc": "1,2"}}},
                               "geo_distance requires 'distance'"),
                              ({"query": {"geo_distance": {"distance": "3 parsecs",
                                                           "loc": "1,2"}}},
                               "failed to parse [distance]"),
                              ({"query": {"geo_bounding_box": {"loc": {"top_left": "95,1",
                                                                       "bottom_right": "1,2"}}}},
                               "failed to parse point"),
                              ({"query": {"geo_distance": {"distance": 5, "name": "1,2"}}},
                               "not [geo_point]")):
                st, b = m.req("POST", "/geo/_search", body)
                eq(st, 400, label + " refused: %s -> %s" % (body, b))
                if why not in json_text(b):
                    raise AssertionError("%s: %r lacks %r" % (label, b, why))
        for bad in ({"loc": "91,0"}, {"loc": {"lat": 1}}, {"loc": "not a hash!"},
                    {"loc": [1]}, {"loc": True}):
            st, b = n.req("PUT", "/geo/_doc/bad", bad)
            error_is((st, b), 400, "mapper_parsing_exception", "of type [geo_point]")
        st, b = n.req("PUT", "/geo/_doc/bad?refresh=true", {"alt": "nowhere"})
        eq(st, 201, label + " ignore_malformed keeps the document")
        # doc_values: false is accepted and shown back (docs/api.md); the
        # column stays, geo queries read it
        eq(n.req("PUT", "/geo-nodv", {"mappings": {"properties": {
            "g": {"type": "geo_point", "doc_values": False}}}})[0], 200, "geo doc_values false")
        st, b = n.req("GET", "/geo-nodv/_mapping")
        eq(b["geo-nodv"]["mappings"]["properties"]["g"].get("doc_values"), False,
           "geo doc_values shown")
        n.req("DELETE", "/geo-nodv")
        n.req("DELETE", "/geo")


def json_text(b):
    import json
    return json.dumps(b)


def teardown():
    rc = 0
    if SOLO:
        rc = SOLO.stop() or rc
    for n in CLUSTER.values():
        rc = n.stop() or rc
    shutil.rmtree(TMP, ignore_errors=True)
    return rc



@test
def ignored_fields_are_searchable():
    # _ignored holds each field whose malformed value a document skipped
    # (ignore_malformed): exists, term and terms find them, before and
    # after the segments merge
    for label, n, asks in targets():
        n.req("DELETE", "/ign")
        st, b = n.req("PUT", "/ign", {"settings": {"number_of_shards": 2}, "mappings": {
            "properties": {"d": {"type": "date", "ignore_malformed": True},
                           "ip": {"type": "ip", "ignore_malformed": True},
                           "n": {"type": "long", "ignore_malformed": True}}}})
        eq(st, 200, label + ": %s" % b)
        docs = {"1": {"d": "2018-05-11", "ip": ":::1"}, "2": {"d": "bar", "ip": "10.0.0.1"},
                "3": {"d": "bar", "ip": "quux", "n": ["x", "y"]}, "4": {"d": "2020-01-01"}}
        for i, d in docs.items():
            n.req("PUT", "/ign/_doc/%s?refresh=true" % i, d)

        def ids(q):
            st, b = asks[-1].req("POST", "/ign/_search", {"query": q, "sort": ["_id"]})
            eq(st, 200, label + " %s: %s" % (q, b))
            return [h["_id"] for h in b["hits"]["hits"]]
        for _ in range(2):
            eq(ids({"exists": {"field": "_ignored"}}), ["1", "2", "3"], label + " exists")
            eq(ids({"term": {"_ignored": "d"}}), ["2", "3"], label + " term")
            eq(ids({"terms": {"_ignored": ["ip", "n"]}}), ["1", "3"], label + " terms")
            # every hit that has it shows it, also with stored_fields
            for params in ("", "?stored_fields=d"):
                st, b = asks[0].req("POST", "/ign/_search" + params,
                                    {"query": {"match_all": {}}, "sort": ["_id"]})
                eq([h.get("_ignored") for h in b["hits"]["hits"]],
                   [["ip"], ["d"], ["d", "ip", "n"], None], label + " hits%s" % params)
            n.req("POST", "/ign/_forcemerge?max_num_segments=1")
        n.req("DELETE", "/ign")

if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
