"""Ingest pipelines (issue 13): _ingest/pipeline put/get/delete and
_simulate, the processors, and pipelines run on writes (?pipeline= on the
index API and _bulk, a bulk action's "pipeline", index.default_pipeline,
index.final_pipeline, "_none"), on a solo node and a 3-node static
cluster. Every expected document is worked out by hand from
Elasticsearch's documented processor behaviour."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-ingest-test-", solo_data=True)
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown


def targets():
    """(label, node to write through, nodes to ask)."""
    c = cluster()
    return [("solo", solo(), [solo()]), ("cluster", c["node-1"], list(c.values()))]


def put_pipeline(n, name, body):
    st, b = n.req("PUT", "/_ingest/pipeline/" + name, body)
    eq((st, b), (200, {"acknowledged": True}), "put pipeline " + name)


def simulate(n, pipeline, docs, params=""):
    st, b = n.req("POST", "/_ingest/pipeline/_simulate" + params,
                  {"pipeline": pipeline, "docs": [{"_source": d} for d in docs]})
    eq(st, 200, "simulate: %s" % b)
    return b["docs"]


def one(n, procs, doc):
    """The _source one simulated document comes out with."""
    r = simulate(n, {"processors": procs}, [doc])[0]
    if "doc" not in r:
        raise AssertionError("simulate failed: %r" % (r,))
    return r["doc"]["_source"]


def sim_error(n, procs, doc):
    r = simulate(n, {"processors": procs}, [doc])[0]
    if "error" not in r:
        raise AssertionError("expected an error, got %r" % (r,))
    return r["error"]


def get_source(n, index, id_):
    st, b = n.req("GET", "/%s/_doc/%s" % (index, id_))
    eq(st, 200, "get %s/%s: %s" % (index, id_, b))
    return b["_source"]


# ---- definitions ----

@test
def pipeline_crud():
    for label, n, nodes in targets():
        body = {"description": "d", "version": 3,
                "processors": [{"set": {"field": "a", "value": 1}}]}
        put_pipeline(n, "crud-1", body)
        put_pipeline(n, "crud-2", {"processors": []})
        for m in nodes:  # every node has it once the put is acknowledged
            st, b = m.req("GET", "/_ingest/pipeline/crud-1")
            eq((st, b), (200, {"crud-1": body}), label + " get on another node")
        st, b = n.req("GET", "/_ingest/pipeline/crud-*")
        eq((st, sorted(b)), (200, ["crud-1", "crud-2"]), label + " wildcard")
        st, b = n.req("GET", "/_ingest/pipeline/crud-1,crud-2")
        eq((st, sorted(b)), (200, ["crud-1", "crud-2"]), label + " list")
        st, b = n.req("GET", "/_ingest/pipeline")
        eq(st == 200 and {"crud-1", "crud-2"} <= set(b), True, label + " all")
        st, b = n.req("GET", "/_ingest/pipeline/crud-nope")
        eq((st, b), (404, {}), label + " missing")
        st, b = n.req("GET", "/_ingest/pipeline/nothing-*")
        eq((st, b), (200, {}), label + " pattern matching nothing")
        st, b = n.req("DELETE", "/_ingest/pipeline/crud-*")
        eq((st, b), (200, {"acknowledged": True}), label + " delete by pattern")
        st, b = n.req("GET", "/_ingest/pipeline/crud-1")
        eq(st, 404, label + " deleted")
        error_is(n.req("DELETE", "/_ingest/pipeline/crud-1"), 404,
                 "resource_not_found_exception", "pipeline [crud-1] is missing")


@test
def pipeline_validation():
    n = solo()
    cases = [
        ({}, "[processors] required property is missing"),
        ({"processors": [{"nope": {}}]}, "No processor type exists with name [nope]"),
        ({"processors": [{"set": {"value": 1}}]}, "[field] required property is missing"),
        ({"processors": [{"set": {"field": "a"}}]}, "[value] required property is missing"),
        ({"processors": [{"set": {"field": "a", "value": 1, "colour": "red"}}]},
         "doesn't support one or more provided configuration parameters [colour]"),
        ({"processors": [{"convert": {"field": "a", "type": "weird"}}]},
         "type [weird] not supported"),
        ({"processors": [{"split": {"field": "a", "separator": "("}}]},
         "Invalid regex pattern"),
        ({"processors": [{"date": {"field": "a", "formats": ["yyyy-MM-dd"],
                                    "timezone": "Mars/Base"}}]},
         "[timezone]"),
        ({"processors": [{"date": {"field": "a", "formats": ["yyyy-MM-dd"],
                                    "output_format": "yyyy-QQ"}}]},
         "[output_format] Invalid format"),
        ({"processors": [{"grok": {"field": "a", "patterns": ["%{IP:x}"]}}]},
         "processor [grok] is not supported"),
        ({"processors": [{"set": {"field": "a", "value": 1, "if": "ctx.b == 1"}}]},
         "[if] conditions on processors are not supported"),
        ({"processors": [{"json": {"field": "a", "target_field": "b", "add_to_root": True}}]},
         "Cannot set a target field"),
        ({"processors": {"set": {}}}, "[processors] property isn't a list"),
        ({"processors": [], "colour": 1},
         "doesn't support one or more provided configuration parameters [colour]"),
    ]
    for body, reason in cases:
        error_is(n.req("PUT", "/_ingest/pipeline/bad", body), 400, "parse_exception", reason)
    st, b = n.req("GET", "/_ingest/pipeline/bad")
    eq(st, 404, "nothing stored by a failed put")
    st, _, _ = n.raw("PUT", "/_ingest/pipeline/bad", "{not json")
    eq(st, 400, "malformed body")


# ---- processors, through _simulate ----

@test
def processors_strings_and_fields():
    n = solo()
    eq(one(n, [{"set": {"field": "x.y", "value": "{{name}}-{{{n}}}"}}], {"name": "ab", "n": 7}),
       {"name": "ab", "n": 7, "x": {"y": "ab-7"}}, "set with templates and a new object")
    eq(one(n, [{"set": {"field": "a", "value": 2, "override": False}}], {"a": 1}), {"a": 1},
       "set override false keeps a value")
    eq(one(n, [{"set": {"field": "a", "value": 2, "override": False}}], {"a": None}), {"a": 2},
       "set override false fills a null")
    eq(one(n, [{"set": {"field": "b", "value": "{{missing}}", "ignore_empty_value": True}}],
           {"a": 1}), {"a": 1}, "ignore_empty_value")
    eq(one(n, [{"set": {"field": "o", "value": {"k": ["{{a}}", 3]}}}], {"a": "v"}),
       {"a": "v", "o": {"k": ["v", 3]}}, "set an object value, rendered inside")
    eq(one(n, [{"lowercase": {"field": "s"}}, {"uppercase": {"field": "t", "target_field": "u"}},
               {"trim": {"field": "w"}}],
           {"s": "HeLLo ÀÉ", "t": ["ab", "çd"], "w": "  x y \t"}),
       {"s": "hello àé", "t": ["ab", "çd"], "u": ["AB", "ÇD"], "w": "x y"}, "case and trim")
    eq(one(n, [{"rename": {"field": "a.b", "target_field": "c"}}], {"a": {"b": 1, "k": 2}}),
       {"a": {"k": 2}, "c": 1}, "rename")
    err = sim_error(n, [{"rename": {"field": "a", "target_field": "c"}}], {"a": 1, "c": 2})
    eq(err["reason"], "field [c] already exists", "rename onto an existing field")
    eq(one(n, [{"remove": {"field": ["a", "b.c"]}}], {"a": 1, "b": {"c": 2, "d": 3}}),
       {"b": {"d": 3}}, "remove a list")
    err = sim_error(n, [{"remove": {"field": "zz"}}], {"a": 1})
    eq(err["reason"], "field [zz] not present as part of path [zz]", "remove missing")
    eq(one(n, [{"remove": {"field": "zz", "ignore_missing": True}}], {"a": 1}), {"a": 1},
       "remove ignore_missing")
    eq(one(n, [{"append": {"field": "t", "value": ["b", "c"]}},
               {"append": {"field": "u", "value": "x"}},
               {"append": {"field": "t", "value": ["a", "d"], "allow_duplicates": False}}],
           {"t": "a"}), {"t": ["a", "b", "c", "d"], "u": ["x"]}, "append")
    eq(one(n, [{"join": {"field": "l", "separator": "-"}}], {"l": ["a", 1, True]}),
       {"l": "a-1-true"}, "join")
    eq(one(n, [{"dot_expander": {"field": "a.b"}}], {"a.b": 1, "c": 2}),
       {"a": {"b": 1}, "c": 2}, "dot_expander")
    eq(one(n, [{"set": {"field": "l.1", "value": "z"}}], {"l": ["a", "b"]}),
       {"l": ["a", "z"]}, "set into a list element")
    err = sim_error(n, [{"lowercase": {"field": "n"}}], {"n": 5})
    eq(err["reason"], "field [n] of type [java.lang.Integer] cannot be cast to "
       "[java.lang.String]", "lowercase of a number")
    err = sim_error(n, [{"lowercase": {"field": "nope"}}], {"n": 5})
    eq(err["reason"], "field [nope] not present as part of path [nope]", "missing input")
    eq(one(n, [{"lowercase": {"field": "nope", "ignore_missing": True}}], {"n": 5}), {"n": 5},
       "ignore_missing")


@test
def processors_parse():
    n = solo()
    eq(one(n, [{"convert": {"field": "i", "type": "integer"}},
               {"convert": {"field": "f", "type": "float"}},
               {"convert": {"field": "b", "type": "boolean"}},
               {"convert": {"field": "s", "type": "string"}},
               {"convert": {"field": "l", "type": "long"}},
               {"convert": {"field": "a", "type": "auto", "target_field": "a2"}}],
           {"i": "42", "f": "2.5", "b": "TRUE", "s": 17, "l": ["1", "-2"], "a": "3.25"}),
       {"i": 42, "f": 2.5, "b": True, "s": "17", "l": [1, -2], "a": "3.25", "a2": 3.25},
       "convert")
    err = sim_error(n, [{"convert": {"field": "i", "type": "integer"}}], {"i": "4x"})
    eq(err["reason"], "unable to convert [4x] to integer", "convert error")
    err = sim_error(n, [{"convert": {"field": "i", "type": "integer"}}], {"i": "3000000000"})
    eq(err["reason"], "unable to convert [3000000000] to integer", "integer range")
    eq(one(n, [{"split": {"field": "s", "separator": "\\s*,\\s*"}}], {"s": "a , b,c,,"}),
       {"s": ["a", "b", "c"]}, "split drops trailing empties")
    eq(one(n, [{"split": {"field": "s", "separator": ",", "preserve_trailing": True}}],
           {"s": "a,,b,,"}), {"s": ["a", "", "b", "", ""]}, "split preserve_trailing")
    eq(one(n, [{"gsub": {"field": "s", "pattern": "(\\d+)-(\\d+)", "replacement": "$2/$1",
                         "target_field": "t"}}], {"s": "10-20 and 3-4"}),
       {"s": "10-20 and 3-4", "t": "20/10 and 4/3"}, "gsub with groups")
    eq(one(n, [{"json": {"field": "j"}}], {"j": "{\"a\": [1, {\"b\": null}]}"}),
       {"j": {"a": [1, {"b": None}]}}, "json in place")
    eq(one(n, [{"json": {"field": "j", "add_to_root": True}}], {"j": "{\"a\": 1, \"k\": 2}",
                                                                 "k": 0}),
       {"j": "{\"a\": 1, \"k\": 2}", "a": 1, "k": 2}, "json add_to_root")
    eq(one(n, [{"date": {"field": "d", "formats": ["dd/MM/yyyy HH:mm:ss", "ISO8601"]}},
               {"date": {"field": "u", "formats": ["UNIX"], "target_field": "u2"}},
               {"date": {"field": "m", "formats": ["UNIX_MS"], "target_field": "m2"}}],
           {"d": "05/03/2024 13:04:05", "u": 1700000000, "m": "1700000000123"}),
       {"d": "05/03/2024 13:04:05", "@timestamp": "2024-03-05T13:04:05.000Z",
        "u": 1700000000, "u2": "2023-11-14T22:13:20.000Z",
        "m": "1700000000123", "m2": "2023-11-14T22:13:20.123Z"}, "date")
    eq(one(n, [{"date": {"field": "d", "formats": ["dd/MM/yyyy HH:mm:ss"],
                         "timezone": "Europe/Amsterdam"}},
               {"date": {"field": "d", "formats": ["dd/MM/yyyy HH:mm:ss"], "target_field": "o",
                         "timezone": "{{tz}}", "output_format": "yyyy-MM-dd HH:mm"}}],
           {"d": "05/07/2024 13:04:05", "tz": "-05:00"}),
       {"d": "05/07/2024 13:04:05", "tz": "-05:00",
        "@timestamp": "2024-07-05T13:04:05.000+02:00", "o": "2024-07-05 13:04"},
       "date with a time zone (summer time) and an output format")
    err = sim_error(n, [{"date": {"field": "d", "formats": ["yyyy-MM-dd"]}}], {"d": "soon"})
    eq(err["reason"], "unable to parse date [soon]", "date error")
    line = "1.2.3.4 - - [30/Apr/1998:22:00:52 +0000] \"GET /a.gif HTTP/1.0\" 200 3171"
    eq(one(n, [{"dissect": {"field": "m", "pattern":
                            "%{clientip} %{?ident} %{auth} [%{@ts}] \"%{verb} %{req} "
                            "HTTP/%{httpversion}\" %{status} %{size}"}}], {"m": line}),
       {"m": line, "clientip": "1.2.3.4", "auth": "-", "@ts": "30/Apr/1998:22:00:52 +0000",
        "verb": "GET", "req": "/a.gif", "httpversion": "1.0", "status": "200",
        "size": "3171"}, "dissect, ES's documented example")
    eq(one(n, [{"dissect": {"field": "m", "pattern": "%{+n/2} %{+n/1}:%{*k} %{&k}",
                            "append_separator": " "}}], {"m": "Smith John:age 42"}),
       {"m": "Smith John:age 42", "n": "John Smith", "age": "42"},
       "dissect append order and reference keys")
    eq(one(n, [{"dissect": {"field": "m", "pattern": "%{a->} %{b}"}}], {"m": "x     y"}),
       {"m": "x     y", "a": "x", "b": "y"}, "dissect right padding")
    err = sim_error(n, [{"dissect": {"field": "m", "pattern": "%{a}|%{b}"}}], {"m": "no bar"})
    eq(err["type"], "dissect_exception", "dissect no match")
    eq(one(n, [{"kv": {"field": "m", "field_split": " ", "value_split": "=",
                       "target_field": "kv", "exclude_keys": ["skip"], "trim_value": "\"",
                       "prefix": "p_"}}], {"m": "a=1 b=\"two\" skip=3 a=4"}),
       {"m": "a=1 b=\"two\" skip=3 a=4", "kv": {"p_a": ["1", "4"], "p_b": "two"}}, "kv")


@test
def processors_failure_handling():
    n = solo()
    procs = [{"convert": {"field": "x", "type": "integer", "tag": "conv",
                          "on_failure": [{"set": {"field": "why",
                                                  "value": "{{_ingest.on_failure_message}} "
                                                           "({{_ingest.on_failure_processor_type}}"
                                                           "/{{_ingest.on_failure_processor_tag}})"
                                                  }}]}},
             {"set": {"field": "after", "value": True}}]
    eq(one(n, procs, {"x": "zz"}),
       {"x": "zz", "why": "unable to convert [zz] to integer (convert/conv)", "after": True},
       "processor on_failure with its metadata, then the rest runs")
    eq(one(n, [{"convert": {"field": "x", "type": "integer", "ignore_failure": True}},
               {"set": {"field": "y", "value": 1}}], {"x": "zz"}), {"x": "zz", "y": 1},
       "ignore_failure")
    r = simulate(n, {"processors": [{"fail": {"message": "bad {{x}}"}}],
                     "on_failure": [{"set": {"field": "err",
                                             "value": "{{_ingest.on_failure_message}}"}}]},
                 [{"x": 3}])[0]
    eq(r["doc"]["_source"], {"x": 3, "err": "bad 3"}, "pipeline on_failure")
    err = sim_error(n, [{"fail": {"message": "no {{x}}"}}], {"x": 1})
    eq((err["type"], err["reason"]), ("fail_processor_exception", "no 1"), "fail")
    r = simulate(n, {"processors": [{"drop": {}}]}, [{"x": 1}])
    eq(r, [None], "drop")
    r = simulate(n, {"processors": [{"set": {"field": "a", "value": 1}},
                                    {"lowercase": {"field": "nope"}},
                                    {"set": {"field": "b", "value": 2}}]},
                 [{"k": 1}], "?verbose=true")[0]["processor_results"]
    eq([p["processor_type"] for p in r], ["set", "lowercase"], "verbose: stops at the error")
    eq((r[0]["status"], r[0]["doc"]["_source"]), ("success", {"k": 1, "a": 1}), "verbose 1st")
    eq((r[1]["status"], r[1]["error"]["reason"]),
       ("error", "field [nope] not present as part of path [nope]"), "verbose 2nd")
    # metadata and the stored pipeline's simulate
    put_pipeline(n, "sim-meta", {"processors": [{"set": {"field": "_index", "value": "o-{{k}}"}},
                                                {"set": {"field": "seen", "value": "{{_id}}"}}]})
    st, b = n.req("POST", "/_ingest/pipeline/sim-meta/_simulate",
                  {"docs": [{"_id": "d1", "_index": "i", "_source": {"k": "v"}}]})
    eq(st, 200, "simulate stored: %s" % b)
    d = b["docs"][0]["doc"]
    eq((d["_index"], d["_id"], d["_source"]), ("o-v", "d1", {"k": "v", "seen": "d1"}),
       "metadata fields")
    eq(isinstance(d["_ingest"]["timestamp"], str), True, "_ingest.timestamp")
    error_is(n.req("POST", "/_ingest/pipeline/_simulate", {"pipeline": {"processors": []}}),
             400, "parse_exception", "[docs] required property is missing")
    r = simulate(n, {"processors": []}, [{"a": 1}])
    eq(r[0]["doc"]["_source"], {"a": 1}, "empty pipeline")
    st, b = n.req("POST", "/_ingest/pipeline/_simulate",
                  {"pipeline": {"processors": []}, "docs": [{"_id": "x"}]})
    eq(b["docs"][0]["error"]["reason"], "[_source] required property is missing", "no _source")
    put_pipeline(n, "loop-a", {"processors": [{"pipeline": {"name": "loop-b"}}]})
    put_pipeline(n, "loop-b", {"processors": [{"pipeline": {"name": "loop-a"}}]})
    st, b = n.req("POST", "/_ingest/pipeline/loop-a/_simulate", {"docs": [{"_source": {}}]})
    eq(b["docs"][0]["error"]["reason"], "Cycle detected for pipeline: loop-a", "cycle")


# ---- pipelines on writes ----

@test
def writes_run_pipelines():
    for label, n, nodes in targets():
        put_pipeline(n, "w-tag", {"processors": [
            {"set": {"field": "tag", "value": "t-{{k}}"}},
            {"lowercase": {"field": "k", "ignore_missing": True}}]})
        put_pipeline(n, "w-final", {"processors": [{"set": {"field": "final", "value": True}}]})
        put_pipeline(n, "w-drop", {"processors": [{"drop": {}}]})
        put_pipeline(n, "w-fail", {"processors": [{"convert": {"field": "k", "type": "long"}}]})
        put_pipeline(n, "w-move", {"processors": [{"set": {"field": "_index",
                                                           "value": "wmoved"}}]})
        st, b = n.req("PUT", "/wp", {"settings": {"number_of_shards": 3,
                                                  "number_of_replicas": 0,
                                                  "index.final_pipeline": "w-final"}})
        eq(st, 200, label + " create: %s" % b)
        st, b = n.req("PUT", "/wp/_doc/1?pipeline=w-tag&refresh=true", {"k": "AbC"})
        eq((st, b.get("result")), (201, "created"), label + " index with ?pipeline")
        st, b = n.bulk([{"index": {"_index": "wp", "_id": "2", "pipeline": "w-tag"}}, {"k": "X"},
                        {"index": {"_index": "wp", "_id": "3"}}, {"k": "Y"},
                        {"index": {"_index": "wp", "_id": "4", "pipeline": "w-drop"}}, {"k": 1},
                        {"index": {"_index": "wp", "_id": "5", "pipeline": "w-fail"}},
                        {"k": "nan"},
                        {"create": {"_index": "wp", "_id": "6", "pipeline": "nope"}}, {"k": 1},
                        {"index": {"_index": "wp", "_id": "7", "pipeline": "w-move"}},
                        {"k": "m"},
                        {"delete": {"_index": "wp", "_id": "99"}}],
                       params="?refresh=true")
        eq(st, 200, label + " bulk: %s" % b)
        items = [list(i.values())[0] for i in b["items"]]
        eq([i["status"] for i in items], [201, 201, 200, 400, 400, 201, 404],
           label + " bulk statuses: %s" % items)
        eq((items[2]["result"], items[2]["_version"]), ("noop", -3), label + " dropped")
        eq(items[3]["error"]["reason"], "unable to convert [nan] to long", label + " failed")
        eq(items[4]["error"]["reason"], "pipeline with id [nope] does not exist",
           label + " missing pipeline")
        eq(items[5]["_index"], "wmoved", label + " _index set by the pipeline")
        eq(b["errors"], True, label + " errors flag")
        for m in nodes:
            eq(get_source(m, "wp", "1"), {"k": "abc", "tag": "t-AbC", "final": True},
               label + " doc 1")
            eq(get_source(m, "wp", "2"), {"k": "x", "tag": "t-X", "final": True},
               label + " doc 2")
            eq(get_source(m, "wp", "3"), {"k": "Y", "final": True}, label + " doc 3: final only")
            for missing in ("4", "5", "6"):
                st, _ = m.req("GET", "/wp/_doc/" + missing)
                eq(st, 404, label + " doc %s not indexed" % missing)
            # the final pipeline is the original index's, resolved before the
            # request's pipeline ran (as in ES 7.10)
            eq(get_source(m, "wmoved", "7"), {"k": "m", "final": True},
               label + " doc 7 in the other index")
        # ?pipeline= on _bulk and index.default_pipeline, and _none
        st, b = n.req("PUT", "/wp/_settings", {"index.default_pipeline": "w-tag"})
        eq(st, 200, label + " set default_pipeline: %s" % b)
        st, b = n.req("GET", "/wp/_settings")
        eq((b["wp"]["settings"]["index"]["default_pipeline"],
            b["wp"]["settings"]["index"]["final_pipeline"]), ("w-tag", "w-final"),
           label + " settings shown")
        st, b = n.req("PUT", "/wp/_doc/10?refresh=true", {"k": "D"})
        eq(st, 201, label + " default pipeline write")
        st, b = n.req("PUT", "/wp/_doc/11?pipeline=_none&refresh=true", {"k": "D"})
        eq(st, 201, label + " _none write")
        st, b = n.bulk([{"index": {"_index": "wp", "_id": "12"}}, {"k": "Q"}],
                       params="?pipeline=w-drop&refresh=true")
        eq(list(b["items"][0].values())[0]["result"], "noop", label + " ?pipeline= on _bulk")
        st, b = n.req("PUT", "/wp/_doc/13?pipeline=w-drop", {"k": 1})
        eq((st, b["result"], b["_version"]), (200, "noop", -3), label + " dropped single doc")
        error_is(n.req("PUT", "/wp/_doc/14?pipeline=w-fail", {"k": "zz"}), 400,
                 "illegal_argument_exception", "unable to convert [zz] to long")
        for m in nodes:
            eq(get_source(m, "wp", "10"), {"k": "d", "tag": "t-D", "final": True},
               label + " default + final")
            eq(get_source(m, "wp", "11"), {"k": "D", "final": True}, label + " _none + final")
            for missing in ("12", "13", "14"):
                st, _ = m.req("GET", "/wp/_doc/" + missing)
                eq(st, 404, label + " doc %s not indexed" % missing)
        error_is(n.req("PUT", "/wp/_settings", {"index.default_pipeline": 5}), 400,
                 "illegal_argument_exception", "default_pipeline")
        st, b = n.req("POST", "/wp/_count")
        eq(b["count"], 5, label + " count")


@test
def reindex_and_update_by_query_run_pipelines():
    for label, n, nodes in targets():
        put_pipeline(n, "rq-up", {"processors": [{"uppercase": {"field": "k"}}]})
        put_pipeline(n, "rq-dflt", {"processors": [{"set": {"field": "d", "value": 1}}]})
        put_pipeline(n, "rq-drop", {"processors": [{"drop": {}}]})
        put_pipeline(n, "rq-id", {"processors": [{"set": {"field": "_id", "value": "x"}}]})
        n.req("PUT", "/rq-src", {"settings": {"number_of_shards": 2, "number_of_replicas": 0}})
        n.req("PUT", "/rq-dst", {"settings": {"number_of_shards": 2, "number_of_replicas": 0,
                                              "default_pipeline": "rq-dflt"}})
        st, b = n.bulk([{"index": {"_index": "rq-src", "_id": "1"}}, {"k": "a"},
                        {"index": {"_index": "rq-src", "_id": "2"}}, {"k": "b"}],
                       params="?refresh=true")
        eq(b["errors"], False, label + " load")
        st, b = n.req("POST", "/_reindex?refresh=true",
                      {"source": {"index": "rq-src"}, "dest": {"index": "rq-dst"}})
        eq((st, b.get("created")), (200, 2), label + " reindex: %s" % b)
        eq(get_source(n, "rq-dst", "1"), {"k": "a", "d": 1}, label + " dest default pipeline")
        st, b = n.req("POST", "/_reindex?refresh=true",
                      {"source": {"index": "rq-src"},
                       "dest": {"index": "rq-dst", "pipeline": "rq-up"}})
        eq((st, b.get("updated")), (200, 2), label + " reindex with dest.pipeline: %s" % b)
        for m in nodes:
            eq(get_source(m, "rq-dst", "2"), {"k": "B"}, label + " dest.pipeline ran")
        st, b = n.req("POST", "/rq-src/_update_by_query?pipeline=rq-up&refresh=true", {})
        eq((st, b.get("updated")), (200, 2), label + " update_by_query: %s" % b)
        eq(get_source(n, "rq-src", "1"), {"k": "A"}, label + " ?pipeline on update_by_query")
        st, b = n.req("POST", "/rq-src/_update_by_query?pipeline=rq-drop&refresh=true", {})
        eq((st, b.get("noops"), b.get("updated")), (200, 2, 0), label + " dropped: noops")
        st, b = n.req("POST", "/rq-src/_update_by_query?pipeline=rq-id", {})
        eq((st, len(b.get("failures", []))), (200, 2), label + " _id change refused: %s" % b)
        eq("may not change [_index] or [_id]" in b["failures"][0]["cause"]["reason"], True,
           label + " failure reason")
        st, b = n.req("POST", "/_reindex", {"source": {"index": "rq-src"},
                                            "dest": {"index": "rq-dst", "pipeline": "nope"}})
        eq((st, b["failures"][0]["cause"]["reason"]),
           (200, "pipeline with id [nope] does not exist"), label + " missing pipeline")


@test
def pipelines_survive_restart():
    n = solo()
    put_pipeline(n, "keep", {"processors": [{"set": {"field": "kept", "value": 1}}]})
    n.restart()
    st, b = n.req("GET", "/_ingest/pipeline/keep")
    eq((st, list(b)), (200, ["keep"]), "pipeline after a restart")
    st, b = n.req("PUT", "/kp/_doc/1?pipeline=keep&refresh=true", {})
    eq(st, 201, "write after restart: %s" % b)
    eq(get_source(n, "kp", "1"), {"kept": 1}, "pipeline runs after a restart")



if __name__ == "__main__":
    run_tests(budget_s=240, teardown=teardown)
