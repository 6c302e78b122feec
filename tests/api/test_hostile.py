"""Hostile input: 2,000 generated malformed requests (seeded) across every
endpoint. Each must be answered 4xx with the Elasticsearch error shape and a
matching "status"; the node must stay up; the document count and mappings
must not change (every request here is one the node must refuse).
Also: explicit limits (nesting, numbers, UTF-8, request line, headers,
result window, bool clauses, regexp) and path traversal through index names.

    SHOAL_HOSTILE_N=5000 SHOAL_HOSTILE_SEED=7 python3 tests/api/test_hostile.py
"""
import json
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node, eq, run_tests, test  # noqa: E402

N = int(os.environ.get("SHOAL_HOSTILE_N", "2000"))
SEED = int(os.environ.get("SHOAL_HOSTILE_SEED", "20261130"))
IX = "hx"
NDOCS = 20

node = None


def setup():
    global node
    node = Node()
    st, b = node.req("PUT", "/" + IX, {
        "settings": {"number_of_shards": 2},
        "mappings": {"properties": {
            "title": {"type": "text"}, "tag": {"type": "keyword"},
            "n": {"type": "integer"}, "when": {"type": "date"},
            "price": {"type": "double"}}}})
    assert st == 200, (st, b)
    lines = []
    for i in range(NDOCS):
        lines.append({"index": {"_index": IX, "_id": str(i)}})
        lines.append({"title": "doc number %d" % i, "tag": "t%d" % (i % 3), "n": i,
                      "when": "2024-01-%02d" % (i % 28 + 1), "price": i * 1.5})
    st, b = node.bulk(lines, params="?refresh=true")
    assert st == 200 and not b["errors"], (st, b)


def state():
    """(document count, mappings) through the public API."""
    st, c = node.req("GET", "/%s/_count" % IX)
    assert st == 200, (st, c)
    st, m = node.req("GET", "/%s/_mapping" % IX)
    assert st == 200, (st, m)
    st, ix = node.req("GET", "/_cat/indices?format=json")
    assert st == 200, (st, ix)
    return c["count"], m, sorted(i["index"] for i in ix)


# ---- generators: each returns (method, path, body bytes or None, headers) ----

DEEP = 1000


def deep_array(n):
    return ("[" * n + "]" * n).encode()


def deep_object(n):
    return ('{"a":' * n + "1" + "}" * n).encode()


def deep_bool(n):
    q = '{"match_all":{}}'
    for _ in range(n):
        q = '{"bool":{"must":[%s]}}' % q
    return ('{"query":%s}' % q).encode()


def truncated(rng, doc):
    s = json.dumps(doc).encode()
    return s[:rng.randrange(1, len(s))]


def bad_utf8(rng):
    junk = rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf",
                       b"\xf8\x88\x80\x80\x80", b"\xf4\x90\x80\x80"])
    return rng.choice([
        b'{"query":{"match":{"title":"a' + junk + b'"}}}',
        b'{"title":"x' + junk + b'y","n":1}',
        b'{"q' + junk + b'":1}',
    ])


HUGE_DOUBLE = [b"1e400", b"-1e400", b"1" * 400, b"1e309"]
HUGE = [b"1e400", b"-1e400", b"99999999999999999999999999", b"1" * 400,
        b"-99999999999999999999", b"1e309"]


def giant(rng):
    return "g" * rng.choice([70000, 300000, 1100000])


def search_body(rng):
    """A search body that must be refused."""
    k = rng.randrange(15)
    if k == 0:
        return truncated(rng, {"query": {"match": {"title": "doc"}}, "size": 3})
    if k == 1:
        return bad_utf8(rng)
    if k == 2:
        return rng.choice([deep_array, deep_object, deep_bool])(rng.choice([101, 300, DEEP]))
    if k == 3:
        return b'{"size":' + rng.choice(HUGE) + b"}"
    if k == 4:
        return b'{"from":' + rng.choice(HUGE) + b"}"
    if k == 5:
        return json.dumps(rng.choice([
            {"query": 5}, {"query": "x"}, {"query": []}, {"size": "abc"}, {"size": -1},
            {"from": -5}, {"from": "z"}, {"query": {"match": [1, 2]}},
            {"query": {"term": {"n": {"value": {"x": 1}}}}},
            {"query": {"bool": {"must": 7}}}, {"sort": {"n": {"order": "sideways"}}},
            {"aggs": {"a": {"terms": {"field": "tag", "size": "many"}}}},
            {"aggs": {"a": {"nosuch_agg": {}}}}, {"aggs": 3},
            {"query": {"range": {"n": {"gte": "abc"}}}},
            {"track_total_hits": "maybe"}, {"_source": 12},
            {"query": {"match_all": {}}, "nosuch_key": 1},
            {"query": {"bool": [1]}}, {"aggs": [1]}, {"aggs": {"a": [1]}}, {"query": {"match": {"title": [{}]}}},
            {"sort": [{"n": [1]}]}, {"query": {"bool": {"must": [[1]]}}}, {"query": {"terms": {"tag": {"a": 1}}}},
        ])).encode()
    if k == 6:
        return json.dumps({"query": {rng.choice(["nosuch", "matchh", "Match", "", "x" * 300]): {}}}).encode()
    if k == 7:
        return json.dumps({"query": {"match": {giant(rng): "x"}}, "nosuch": 1}).encode()
    if k == 8:
        return json.dumps({"from": 9000, "size": 2000}).encode()
    if k == 9:
        return json.dumps({"query": {"bool": {"should": [{"term": {"tag": "t%d" % i}}
                                                          for i in range(1100)]}}}).encode()
    if k == 10:
        return rng.choice([b"[]", b"5", b'"str"', b"null", b"true", b"{}{}", b"{,}", b"\x00",
                           b'{"query":{"match_all":{}}} trailing'])
    if k == 11:
        return json.dumps({"query": {"regexp": {"tag": rng.choice(["[ab]*a[ab]{20}", "(a|b)*a(a|b){16}c", "[", "a{99999}"])}}}).encode()
    if k == 12:
        return json.dumps({"query": {"match_all": {}}, "from": 2147483647, "size": 10}).encode()
    if k == 13:
        return b'{"query":{"match":{"title":"\\ud800"}}, "size":"' + b"9" * 30 + b'"}'
    return json.dumps({"query": {"query_string": {"query": rng.choice(["title:(", "AND", "n:[1 TO", "\"unclosed", "((((", "title:/[/"])}}}).encode()


def doc_body(rng):
    """A document body that must be refused for index hx."""
    k = rng.randrange(8)
    if k == 0:
        return truncated(rng, {"title": "t", "n": 3})
    if k == 1:
        return bad_utf8(rng)
    if k == 2:
        return rng.choice([deep_array, deep_object])(rng.choice([101, DEEP]))
    if k == 3:
        return b'{"title":"x","price":' + rng.choice(HUGE_DOUBLE) + b"}"
    if k == 4:
        return json.dumps(rng.choice([{"n": "abc"}, {"n": {"x": 1}}, {"when": "not a date"},
                                      {"n": [1, "zz"]}, {"price": "cheap"}, {"when": {}},
                                      {"n": True}])).encode()
    if k == 5:
        return rng.choice([b"[1,2]", b"5", b'"s"', b"null", b"{}{}", b"\xef\xbb"])
    if k == 6:
        return json.dumps({"n": 2 ** rng.choice([31, 40, 63, 64, 70])}).encode()
    return json.dumps({"": 1, "title": "empty field name"}).encode() if rng.random() < 0.5 \
        else json.dumps({"a..b": 1}).encode()


def bulk_body(rng):
    """An NDJSON body the whole of which must be refused."""
    good = '{"index":{"_index":"%s","_id":"zz%d"}}\n{"title":"new","n":1}\n' % (IX, rng.randrange(99))
    k = rng.randrange(9)
    bad = [
        '{"index":{"_index":"%s"}\n{"title":"x"}\n' % IX,          # truncated action
        '{"nosuch_action":{"_index":"%s"}}\n{"title":"x"}\n' % IX,  # unknown action
        '[1,2]\n{"title":"x"}\n',                                  # action not an object
        '{"index":{"_index":"%s","_id":"q"}}\n' % IX,               # source missing
        '"str"\n',
        '{"index":{"_index":"%s","nosuch_meta":1}}\n{"a":1}\n' % IX,
        '{"index":{"_index":"%s"},"delete":{"_index":"%s"}}\n{"a":1}\n' % (IX, IX),
        '{"index":5}\n{"a":1}\n',
        '{"index":{"_index":"%s"}}\n{"a":' % IX,
    ][k if k != 8 else 0]
    if rng.random() < 0.5:
        return (good + bad).encode() if k != 3 else (bad).encode()
    return bad.encode()


BAD_NAMES = ["UPPER", "a%20b", "a*b", "a?b", "a<b", "a>b", "a|b", "a,b", "a#b", "-dash", "_under",
             "+plus", ".", "..", "%2e%2e", "%2E%2E", "..%2f..%2fetc", "a%2fb", "a%5cb", "x" * 300,
             "%00", "a%00b", "%ff", "%c3", "a\\b", "a%22b", "%2e"]


def bad_name(rng):
    return rng.choice(BAD_NAMES)


PARAM_JUNK_ANY = ["nosuch=1", "pretty=%ff", "Nosuch=x", "nosuch", "%ff=1", "a%00b=1"]
PARAM_JUNK = ["nosuch=1", "size=abc", "from=-3", "size=99999999999999999999", "timeout=banana",
              "q=title:(", "q=n:[1%20TO", "sort=n:sideways", "track_total_hits=maybe",
              "version=abc", "pretty=%ff", "filter_path=%00",
              "size=1e400", "terminate_after=-1", "from=9999&size=9999"]


def gen(rng):
    """One malformed request."""
    k = rng.randrange(22)
    J = {"Content-Type": "application/json"}
    ND = {"Content-Type": "application/x-ndjson"}
    if k in (0, 1, 2):
        return rng.choice(["POST", "GET"]), "/%s/%s" % (IX, rng.choice(["_search", "_count"])), search_body(rng), J
    if k == 3:
        return "POST", "/_search", search_body(rng), J
    if k == 4:
        return rng.choice(["PUT", "POST"]), "/%s/_doc/%d" % (IX, rng.randrange(1000, 2000)), doc_body(rng), J
    if k == 5:
        return "POST", "/%s/_doc" % IX, doc_body(rng), J
    if k == 6:
        return "PUT", "/%s/_create/c%d" % (IX, rng.randrange(1000)), doc_body(rng), J
    if k == 7:
        return "POST", rng.choice(["/_bulk", "/%s/_bulk" % IX]), bulk_body(rng), ND
    if k == 8:
        b = rng.choice([bulk_body(rng), b'{}\n{"query":{"nosuch":{}}}\n', b'[1]\n{}\n',
                        b'{}\n' + search_body(rng) + b"\n"])
        return "POST", "/_msearch", b, ND
    if k == 9:
        return "POST", "/%s/_update/%d" % (IX, rng.randrange(NDOCS)), rng.choice([
            b"{}", b'{"doc":5}', b'{"doc":[1]}', b"[1]", b'{"doc":{"n":[{}]}}', b'{"doc":{"n":"abc"}}', b'{"nosuch":1}', truncated(rng, {"doc": {"n": 1}}),
            bad_utf8(rng), deep_object(DEEP), b'{"doc":{"price":1e400}}']), J
    if k == 10:
        return rng.choice(["PUT", "POST"]), "/%s/_mapping" % IX, rng.choice([
            b'{"properties":{"n":{"type":"text"}}}', b'{"properties":{"z":{"type":"nosuch"}}}',
            b'{"properties":5}', truncated(rng, {"properties": {"q": {"type": "keyword"}}}),
            deep_object(DEEP), bad_utf8(rng), b'{"properties":{"z":{"type":"keyword","nosuch_param":1}}}',
            b'{"dynamic":"sometimes"}', b"[]", b'{"properties":[{"a":1}]}', b'{"properties":{"a":[1]}}',
            b'{"properties":{"a":{"type":"object","properties":[1]}}}']), J
    if k == 11:
        return "PUT", "/%s/_settings" % IX, rng.choice([
            b'{"index":{"number_of_shards":5}}', b'{"index.nosuch":1}', b'{"index":{"refresh_interval":"fast"}}',
            b'{"index":{"number_of_replicas":-1}}', b'[1]', b'{"index":[1]}', b'{"settings":[{"a":1}]}', b'{"index":{"number_of_replicas":1e400}}',
            truncated(rng, {"index": {"refresh_interval": "1s"}}), bad_utf8(rng)]), J
    if k == 12:
        name = bad_name(rng)
        return "PUT", "/" + name, rng.choice([None, b'{"settings":{"number_of_shards":1}}']), J
    if k == 13:
        # wildcards and "_..." are index expressions when read, not names
        name = rng.choice([b for b in BAD_NAMES if "*" not in b and "?" not in b and not b.startswith("_")])
        return rng.choice(["GET", "POST"]), "/%s/%s" % (name, rng.choice(["_search", "_count", "_mapping", "_doc/1", "_refresh"])), None, J
    if k == 14:
        name = bad_name(rng)
        return rng.choice(["PUT", "POST"]), "/%s/_doc/1" % name, b'{"a":1}', J
    if k == 15:
        return "PUT", "/" + rng.choice(["hx", "newix%d" % rng.randrange(99)]), rng.choice([
            b'{"settings":{"number_of_shards":0}}', b'{"settings":{"number_of_shards":1e400}}',
            b'{"settings":{"number_of_shards":"many"}}', b'{"mappings":{"properties":{"a":{"type":"nosuch"}}}}',
            truncated(rng, {"settings": {"number_of_shards": 1}}), deep_object(DEEP), bad_utf8(rng),
            b'{"nosuch_section":{}}', b'{"settings":{"index":{"number_of_shards":-1}}}',
            b'{"settings":[1]}', b'{"mappings":[1]}', b'{"mappings":{"properties":[1]}}', b'[1]',
            b'{"settings":{"index":[1]}}', b'{"mappings":{"properties":{"a":[1]}}}']), J
    if k == 16:
        path = rng.choice(["/%s/_search", "/%s/_count", "/%s/_doc/1", "/%s/_mapping", "/_cat/indices",
                           "/_cluster/health", "/%s/_settings", "/%s/_stats", "/"])
        if "%s" in path:
            path = path % IX
        junk = rng.choice(PARAM_JUNK if path.endswith("_search") else PARAM_JUNK_ANY)
        return "GET", path + "?" + junk, None, J
    if k == 17:
        # wrong methods
        return rng.choice([("DELETE", "/_search"), ("PUT", "/_count"), ("PATCH", "/%s" % IX),
                           ("DELETE", "/_cluster/health"), ("PUT", "/%s/_search" % IX),
                           ("DELETE", "/%s/_mapping" % IX), ("PUT", "/_bulk"), ("DELETE", "/_cat/indices"),
                           ("TRACE", "/"), ("OPTIONS", "/%s/_doc/1" % IX), ("PATCH", "/%s/_doc/1" % IX),
                           ("DELETE", "/%s/_refresh" % IX), ("PUT", "/_mget")]) + (None, J)
    if k == 18:
        return "POST", rng.choice(["/_mget", "/%s/_mget" % IX]), rng.choice([
            b'{}', b'{"docs":5}', b'{"ids":"x"}', b'{"docs":[{"_index":"UPPER","_id":"1"}]}' if False else b'{"docs":[5]}',
            truncated(rng, {"ids": ["1", "2"]}), bad_utf8(rng), deep_array(DEEP)]), J
    if k == 19:
        return "POST", "/%s/_delete_by_query" % IX, rng.choice([
            b"{}", b'{"query":5}', b'{"query":{"nosuch":{}}}', truncated(rng, {"query": {"match_all": {}}}),
            deep_bool(rng.choice([101, 300])), bad_utf8(rng)]), J
    if k == 20:
        return "PUT", "/_cluster/settings", rng.choice([
            b'{"persistent":5}', b'{"persistent":[1]}', b'{"transient":[{"a":1}]}', b'[1]',
            b'{"persistent":{"nosuch.setting":1}}', truncated(rng, {"persistent": {}}),
            bad_utf8(rng), deep_object(DEEP)]), J
    return rng.choice(["GET", "POST"]), "/_search/scroll", rng.choice([
        b'{"scroll_id":"nosuch"}', b'{"scroll_id":5}', b'{"scroll":"forever","scroll_id":"x"}',
        truncated(rng, {"scroll_id": "abc"}), bad_utf8(rng)]), J


def check_error(st, h, data, what):
    if st == 405:
        # Elasticsearch's own reply to a wrong method: a string error
        body = json.loads(data)
        if body.get("status") != 405 or "Incorrect HTTP method" not in body.get("error", ""):
            raise AssertionError("%s: bad 405 body %r" % (what, data[:300]))
        return
    if st == 200 and what.split(" ")[2].startswith("/_msearch"):
        # _msearch answers 200 with one error per refused search (as ES does)
        body = json.loads(data)
        for one in body.get("responses", []):
            check_error(one.get("status", 200), {}, json.dumps(one).encode(), what + " (item)")
        if not body.get("responses"):
            raise AssertionError("%s: no responses" % what)
        return
    if not 400 <= st < 500:
        raise AssertionError("%s: expected 4xx, got %d: %r" % (what, st, data[:300]))
    if not data:
        raise AssertionError("%s: empty body with status %d" % (what, st))
    try:
        body = json.loads(data)
    except ValueError:
        raise AssertionError("%s: body not JSON: %r" % (what, data[:300]))
    if not isinstance(body, dict) or body.get("status") != st or not isinstance(body.get("error"), dict):
        raise AssertionError("%s: not an error shape for %d: %r" % (what, st, data[:300]))
    err = body["error"]
    rc = err.get("root_cause")
    if not isinstance(rc, list) or not rc or not isinstance(rc[0], dict) or "type" not in rc[0]:
        raise AssertionError("%s: root_cause missing: %r" % (what, data[:300]))
    if not isinstance(err.get("type"), str) or not isinstance(err.get("reason"), str):
        raise AssertionError("%s: type/reason missing: %r" % (what, data[:300]))


def send(method, path, body, headers, timeout=30):
    st, h, data = node.raw(method, path, body, headers, timeout=timeout)
    return st, h, data


@test
def generated_requests_refused():
    rng = random.Random(SEED)
    before = state()
    failures = []
    kinds = {}
    t0 = time.time()
    for i in range(N):
        method, path, body, headers = gen(rng)
        what = "#%d %s %s %r" % (i, method, path[:80], (body or b"")[:80])
        try:
            st, h, data = send(method, path, body, headers)
        except Exception as e:  # noqa: BLE001 - any client-side failure is a finding
            node.close_conn()
            if node.proc.poll() is not None:
                raise AssertionError("%s: node died (%s); log: %s" % (what, e, node.log_tail()))
            failures.append("%s: connection error %s" % (what, e))
            continue
        kinds[st] = kinds.get(st, 0) + 1
        try:
            check_error(st, h, data, what)
        except AssertionError as e:
            failures.append(str(e))
        if i % 100 == 99:
            if node.proc.poll() is not None:
                raise AssertionError("node died after %s" % what)
            now = state()
            if now != before:
                failures.append("state changed in the 100 requests up to %s: %r -> %r" % (what, before, now))
                before = now
    node.refresh(IX)
    if state() != before:
        failures.append("state changed after refresh: %r -> %r" % (before, state()))
    print("  %d requests in %.1fs, statuses %s" % (N, time.time() - t0, sorted(kinds.items())))
    if failures:
        raise AssertionError("%d of %d not refused properly:\n  %s" % (
            len(failures), N, "\n  ".join(f[:400] for f in failures[:40])))


def raw_http(data, timeout=10):
    """Sends bytes on a fresh socket; returns (status, body bytes)."""
    s = socket.create_connection(("127.0.0.1", node.port), timeout=timeout)
    try:
        s.sendall(data)
        buf = b""
        while True:
            try:
                c = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not c:
                break
            buf += c
            if b"\r\n\r\n" in buf:
                head, _, rest = buf.partition(b"\r\n\r\n")
                cl = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(rest) >= int(cl[0].split(b":")[1]):
                    break
    finally:
        s.close()
    if not buf.startswith(b"HTTP/1."):
        return None, buf
    head, _, rest = buf.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), rest


@test
def long_request_line_414():
    st, body = raw_http(b"GET /" + b"a" * 5000 + b"/_search HTTP/1.1\r\nHost: x\r\n\r\n")
    eq(st, 414, "status for a 5 KB request line")
    check_error(st, {}, body, "414")


@test
def large_headers_431():
    st, body = raw_http(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n")
    eq(st, 431, "status for 9 KB of headers")
    check_error(st, {}, body, "431")
    st, _ = node.req("GET", "/")
    eq(st, 200, "node answers after")


@test
def json_limits_400():
    for body, what in [(deep_array(101), "nesting 101"), (deep_object(DEEP), "nesting 1000"),
                       (b'{"size":1e400}', "overflowing number"),
                       (b'{"query":{"match":{"title":"\xff"}}}', "invalid UTF-8"),
                       (b'{"query":{"term":{"tag":"\xed\xa0\x80"}}}', "encoded surrogate")]:
        st, h, data = send("POST", "/%s/_search" % IX, body, {"Content-Type": "application/json"})
        eq(st, 400, what)
        check_error(st, h, data, what)
    # 100 levels is still fine
    st, h, data = send("POST", "/%s/_doc/deep" % IX, deep_object(99), {"Content-Type": "application/json"})
    if st not in (200, 201, 400):
        raise AssertionError("nesting 99: %d %r" % (st, data[:200]))
    if st in (200, 201):
        send("DELETE", "/%s/_doc/deep?refresh=true" % IX, None, {})


@test
def query_limits_400():
    for body, what in [({"from": 9995, "size": 10}, "max_result_window"),
                       ({"query": {"bool": {"should": [{"term": {"tag": "t%d" % i}} for i in range(1025)]}}},
                        "max_clause_count"),
                       ({"query": {"regexp": {"tag": "[ab]*a[ab]{20}"}}}, "max_determinized_states")]:
        st, h, data = send("POST", "/%s/_search" % IX, json.dumps(body).encode(), {"Content-Type": "application/json"})
        eq(st, 400, what + ": " + data[:200].decode("utf-8", "replace"))
        check_error(st, h, data, what)


@test
def max_buckets_400():
    """A histogram of 20 prices (0..28.5) at interval 0.0001: ~285,000
    buckets, over search.max_buckets (65,535)."""
    for agg in [{"histogram": {"field": "price", "interval": 0.0001}},
                {"date_histogram": {"field": "when", "fixed_interval": "1s"}}]:
        st, h, data = send("POST", "/%s/_search" % IX, json.dumps({"size": 0, "aggs": {"a": agg}}).encode(),
                           {"Content-Type": "application/json"})
        eq(st, 400, "too many buckets: " + data[:200].decode("utf-8", "replace"))
        check_error(st, h, data, "max_buckets")
    st, h, data = send("POST", "/%s/_search" % IX, json.dumps(
        {"size": 0, "aggs": {"a": {"histogram": {"field": "price", "interval": 10}}}}).encode(),
        {"Content-Type": "application/json"})
    eq(st, 200, "a small histogram still works")


@test
def path_traversal_refused():
    before = state()
    for name in ["..", "%2e%2e", "%2E%2e", ".", "..%2f..%2ftmp", "a%2f..%2f..", "%2f", "..%5c..",
                 "a%2fb", "%2e%2e%2f%2e%2e"]:
        for method, suffix, body in [("PUT", "", None), ("PUT", "/_doc/1", b'{"a":1}'),
                                     ("DELETE", "", None), ("GET", "/_search", None), ("POST", "/_refresh", None)]:
            st, h, data = send(method, "/" + name + suffix, body, {"Content-Type": "application/json"})
            check_error(st, h, data, "%s /%s%s" % (method, name, suffix))
    for junk in [os.path.join(node.data, "..", "a"), "/tmp/a", os.path.join(os.path.dirname(node.data), "tmp")]:
        pass
    eq(state(), before, "state after traversal attempts")
    # nothing was created next to the data directory
    parent = os.path.dirname(os.path.abspath(node.data))
    for n in os.listdir(parent):
        if n in ("a", "b", "tmp", "a%2fb"):
            raise AssertionError("a file appeared beside the data dir: %s" % n)


@test
def slowloris_does_not_block():
    socks = []
    t0 = time.time()
    try:
        for i in range(256):
            try:
                s = socket.create_connection(("127.0.0.1", node.port), timeout=5)
            except OSError:
                break
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finishes the headers
            socks.append(s)
        opened = len(socks)
        served = 0
        for i in range(20):
            c = socket.create_connection(("127.0.0.1", node.port), timeout=10)
            try:
                c.sendall(b"GET /%s/_count HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % IX.encode())
                buf = b""
                while True:
                    d = c.recv(65536)
                    if not d:
                        break
                    buf += d
                if buf.startswith(b"HTTP/1.1 200") or buf.startswith(b"HTTP/1.1 429"):
                    served += buf.startswith(b"HTTP/1.1 200")
                    if buf.startswith(b"HTTP/1.1 429"):
                        check_error(429, {}, buf.partition(b"\r\n\r\n")[2], "429")
            finally:
                c.close()
        print("  %d slow sockets open, %d/20 other clients served in %.1fs" % (opened, served, time.time() - t0))
        if served < 20:
            raise AssertionError("only %d of 20 clients served beside %d slow sockets" % (served, opened))
        # headers must arrive within 10 s: the server drops the slow sockets
        time.sleep(11)
        s = socks[0]
        s.settimeout(5)
        try:
            gone = s.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            gone = True
        except socket.timeout:
            gone = False
        if not gone:
            raise AssertionError("a socket that sent half its headers 11 s ago is still open")
    finally:
        for s in socks:
            s.close()


def teardown():
    return node.cleanup() if node else None


if __name__ == "__main__":
    setup()
    run_tests(budget_s=110, teardown=teardown)
