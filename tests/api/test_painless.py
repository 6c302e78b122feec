"""Update scripts (issue #11, step 4: the Painless subset in script/) through
_update (script, scripted_upsert, upsert), _bulk update actions and
_update_by_query, on a solo node and a 3-node cluster: a table of scripts
and expected documents, compile errors as 400 script_exception naming the
position, run-time errors leaving the document untouched, and hostile
scripts (deep nesting, endless loops, huge strings, oversized sources)
refused in bounded time. (The expression-level table is script/ps_test.c.)

    SHOAL_BIN=build/bin python3 tests/api/test_painless.py
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, error_is, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-painless-test-")
NODES = []

# (script, params, document before, document after, result)
TABLE = [
    ("ctx._source.n += params.k", {"k": 2}, {"n": 1}, {"n": 3}, "updated"),
    ("ctx._source.n++; ctx._source.m = ctx._source.n * 2", None, {"n": 1}, {"n": 2, "m": 4},
     "updated"),
    ("ctx._source.remove('gone')", None, {"n": 1, "gone": True}, {"n": 1}, "updated"),
    ("if (!ctx._source.tags.contains(params.t)) { ctx._source.tags.add(params.t) } "
     "else { ctx.op = 'noop' }", {"t": "b"}, {"tags": ["a"]}, {"tags": ["a", "b"]}, "updated"),
    ("if (!ctx._source.tags.contains(params.t)) { ctx._source.tags.add(params.t) } "
     "else { ctx.op = 'noop' }", {"t": "a"}, {"tags": ["a"]}, {"tags": ["a"]}, "noop"),
    ("ctx._source.name = ctx._source.first + ' ' + ctx._source.last", None,
     {"first": "Ada", "last": "L"}, {"first": "Ada", "last": "L", "name": "Ada L"}, "updated"),
    ("ctx._source.level = ctx._source.n > 10 && ctx._source.n < 20 ? 'mid' : 'other'", None,
     {"n": 15}, {"n": 15, "level": "mid"}, "updated"),
    ("if (ctx._source.n == 0) { ctx.op = 'delete' }", None, {"n": 0}, None, "deleted"),
    ("for (int i = 0; i < params.k; i++) { ctx._source.l.add(i) }", {"k": 3}, {"l": []},
     {"l": [0, 1, 2]}, "updated"),
    ("ctx._source.n -= 1.5", None, {"n": 3}, {"n": 1.5}, "updated"),
]


def start_cluster():
    cfile = os.path.join(TMP, "cluster.json")
    names = ["node-1", "node-2", "node-3"]
    ports = cluster_file(cfile, [(n, None) for n in names])
    out = []
    for n in names:
        d = os.path.join(TMP, n)
        os.makedirs(d, exist_ok=True)
        out.append(ClusterNode(cfile, n, ports[n][0], data=d))
    NODES.extend(out)
    for x in out:
        st, b = x.req("GET", "/_cluster/health?wait_for_status=green&wait_for_nodes=3"
                      "&timeout=60s", timeout=80)
        eq((st, b.get("status")), (200, "green"), "green")
    return out


def suite(nodes):
    n = nodes[0]
    st, b = n.req("PUT", "/ps", {"settings": {"number_of_shards": 3,
                                              "number_of_replicas": 1 if len(nodes) > 1 else 0}})
    eq(st, 200, "create: %s" % b)
    # _update with a script: the table
    for i, (script, params, before, after, result) in enumerate(TABLE):
        doc_id = "t%d" % i
        st, _ = n.req("PUT", "/ps/_doc/%s?refresh=true" % doc_id, before)
        body = {"script": {"source": script, "lang": "painless"}}
        if params is not None:
            body["script"]["params"] = params
        st, b = nodes[i % len(nodes)].req("POST", "/ps/_update/%s?refresh=true" % doc_id, body)
        eq((st, b.get("result")), (200, result), "[%s]: %s" % (script, b))
        st, d = n.req("GET", "/ps/_doc/" + doc_id)
        if after is None:
            eq(st, 404, "[%s] deleted" % script)
        else:
            eq(d["_source"], after, "[%s]" % script)
    # scripted upsert runs the script on the upsert document; a plain
    # upsert is written as given
    st, b = n.req("POST", "/ps/_update/u1", {"script": "ctx._source.c = 1",
                                              "scripted_upsert": True, "upsert": {"x": 1}})
    eq((st, b["result"]), (201, "created"), "scripted upsert")
    eq(n.req("GET", "/ps/_doc/u1")[1]["_source"], {"x": 1, "c": 1}, "scripted upsert doc")
    st, b = n.req("POST", "/ps/_update/u2", {"script": "ctx._source.c = 1", "upsert": {"x": 1}})
    eq(n.req("GET", "/ps/_doc/u2")[1]["_source"], {"x": 1}, "plain upsert doc")
    st, b = n.req("POST", "/ps/_update/u2", {"script": "ctx._source.c = 1", "upsert": {"x": 1}})
    eq(n.req("GET", "/ps/_doc/u2")[1]["_source"], {"x": 1, "c": 1}, "then the script")
    error_is(n.req("POST", "/ps/_update/missing", {"script": "ctx._source.c = 1"}), 404,
             "document_missing_exception")
    # _bulk update actions with scripts
    st, b = n.bulk([{"update": {"_index": "ps", "_id": "u1"}},
                    {"script": {"source": "ctx._source.c += params.d", "params": {"d": 10}}},
                    {"update": {"_index": "ps", "_id": "u2"}}, {"script": "ctx._source.c = "},
                    {"update": {"_index": "ps", "_id": "u3"}},
                    {"script": "ctx._source.c = 5", "scripted_upsert": True, "upsert": {}}],
                   params="?refresh=true")
    eq(st, 200, "bulk")
    items = [it["update"] for it in b["items"]]
    eq([it["status"] for it in items], [200, 400, 201], "bulk statuses: %s" % items)
    eq(items[1]["error"]["type"], "script_exception", "bulk compile error")
    eq(n.req("GET", "/ps/_doc/u1")[1]["_source"]["c"], 11, "bulk script")
    eq(n.req("GET", "/ps/_doc/u3")[1]["_source"], {"c": 5}, "bulk scripted upsert")
    # _update_by_query with a script
    lines = []
    for i in range(300):
        lines += [{"index": {"_index": "ps", "_id": "q%d" % i}}, {"q": i, "tags": []}]
    n.bulk(lines, params="?refresh=true")
    st, b = nodes[-1].req("POST", "/ps/_update_by_query?refresh=true", {
        "query": {"range": {"q": {"gte": 0}}},
        "script": {"source": "if (ctx._source.q % 3 == 0) { ctx._source.tags.add('three') } "
                             "else if (ctx._source.q % 3 == 1) { ctx.op = 'noop' } "
                             "else { ctx.op = 'delete' }"}})
    eq((st, b["updated"], b["noops"], b["deleted"]), (200, 100, 100, 100), "ubq script: %s" % b)
    st, b = n.req("POST", "/ps/_count", {"query": {"term": {"tags": "three"}}})
    eq(b["count"], 100, "tagged")
    st, b = n.req("POST", "/ps/_count", {"query": {"range": {"q": {"gte": 0}}}})
    eq(b["count"], 200, "a third deleted")
    # compile errors: 400 script_exception naming the position; nothing written
    st, before = n.req("GET", "/ps/_doc/u1")
    for src, pos in [("ctx._source.c = ", 16), ("if (ctx._source.c > 1 { }", 22),
                     ("ctx._source.c = 'open", 16), ("ctx._source.c = $", 16)]:
        error_is(n.req("POST", "/ps/_update/u1", {"script": src}), 400, "script_exception",
                 "position [%d]" % pos)
    # run-time errors: 400 and the document untouched
    for src in ["ctx._source.nope += 1", "ctx._source.c = 1 / 0", "ctx._source.c.x = 1",
                "ctx.op = 'explode'", "params.x = 1"]:
        error_is(n.req("POST", "/ps/_update/u1", {"script": {"source": src, "params": {}}}),
                 400, "script_exception")
    st, after = n.req("GET", "/ps/_doc/u1")
    eq((after["_version"], after["_source"]), (before["_version"], before["_source"]),
       "untouched after failed scripts")
    # hostile scripts, each refused in bounded time
    hostile = ["ctx._source.c = " + "(" * 5000 + "1" + ")" * 5000,
               "while (true) { }",
               "for (def i = 0; i < 1000000000; i++) { ctx._source.c = i }",
               "def s = 'x'; while (true) { s = s + s }",
               "def l = []; while (true) { l.add(l.size()) }",
               "ctx._source.c = 1;" * 8000]
    for src in hostile:
        t0 = time.time()
        st, b = n.req("POST", "/ps/_update/u1", {"script": src}, timeout=60)
        took = time.time() - t0
        eq(st, 400, "hostile script refused: %s" % str(b)[:200])
        eq(b["error"]["type"], "script_exception", "hostile type")
        assert took < 15, "a hostile script took %.1fs" % took
    error_is(n.req("POST", "/ps/_update/u1", {"script": {"source": "1", "lang": "groovy"}}),
             400, "illegal_argument_exception")
    error_is(n.req("POST", "/ps/_update/u1", {"script": {"id": "stored"}}), 400,
             "illegal_argument_exception")
    error_is(n.req("POST", "/ps/_update/u1", {"script": "ctx._source.c = 1", "doc": {}}), 400,
             "action_request_validation_exception")
    st, after = n.req("GET", "/ps/_doc/u1")
    eq(after["_version"], before["_version"], "untouched after hostile scripts")


@test
def solo_update_scripts():
    x = Node()
    NODES.append(x)
    suite([x])


@test
def cluster_update_scripts():
    suite(start_cluster())


def teardown():
    rc = 0
    for x in NODES:
        r = x.cleanup()
        if r not in (0, None):
            rc = r
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=600, teardown=teardown)
