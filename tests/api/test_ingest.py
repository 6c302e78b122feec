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
        ({"processors": [{"geoip": {"field": "a"}}]}, "processor [geoip] is not supported"),
        ({"processors": [{"grok": {"field": "a", "patterns": ["%{NOPE:x} %{IP:y}"]}}]},
         "[patterns] Invalid regex pattern found in: [%{NOPE:x} %{IP:y}]. Unable to find "
         "pattern [NOPE] in Grok's pattern dictionary"),
        ({"processors": [{"grok": {"field": "a", "patterns": ["%{WORD:w} ("]}}]},
         "[patterns] Invalid regex pattern found in: [%{WORD:w} (]"),
        ({"processors": [{"grok": {"field": "a", "patterns": ["%{A:a}"],
                                   "pattern_definitions": {"A": "x%{B}", "B": "%{A}"}}}]},
         "circular reference in pattern [A]"),
        ({"processors": [{"grok": {"field": "a", "patterns": []}}]},
         "[patterns] List of patterns must not be empty"),
        ({"processors": [{"grok": {"field": "a"}}]}, "[patterns] required property is missing"),
        ({"processors": [{"grok": {"field": "a", "patterns": ["x"], "colour": 1}}]},
         "processor [grok] doesn't support one or more provided configuration parameters "
         "[colour]"),
        ({"processors": [{"grok": {"field": "a", "patterns": ["x"],
                                   "ecs_compatibility": "v1"}}]}, "[ecs_compatibility] [v1]"),
        ({"processors": [{"foreach": {"field": "a"}}]}, "[processor] required property is missing"),
        ({"processors": [{"foreach": {"field": "a", "processor": {"nope": {}}}}]},
         "No processor type exists with name [nope]"),
        ({"processors": [{"foreach": {"field": "a", "processor": {"uppercase": {}}}}]},
         "[field] required property is missing"),
        ({"processors": [{"script": {"lang": "painless"}}]},
         "Need [source] for an inline script or [id] for a stored script"),
        ({"processors": [{"script": {"id": "s1"}}]}, "[id] stored scripts are not supported"),
        ({"processors": [{"json": {"field": "a", "target_field": "b", "add_to_root": True}}]},
         "Cannot set a target field"),
        ({"processors": {"set": {}}}, "[processors] property isn't a list"),
        ({"processors": [], "colour": 1},
         "doesn't support one or more provided configuration parameters [colour]"),
    ]
    for body, reason in cases:
        error_is(n.req("PUT", "/_ingest/pipeline/bad", body), 400, "parse_exception", reason)
    # Painless that does not compile, in a condition or a script processor
    for body in ({"processors": [{"set": {"field": "a", "value": 1, "if": "ctx.b =="}}]},
                 {"processors": [{"set": {"field": "a", "value": 1,
                                          "if": {"source": "ctx.b == (", "lang": "painless"}}}]},
                 {"processors": [{"script": {"source": "ctx.a = ;"}}]},
                 {"processors": [{"foreach": {"field": "a", "processor": {
                     "script": {"source": "ctx.a = ;"}}}}]}):
        error_is(n.req("PUT", "/_ingest/pipeline/bad", body), 400, "script_exception",
                 "compile error")
    error_is(n.req("PUT", "/_ingest/pipeline/bad",
                   {"processors": [{"script": {"source": "1", "lang": "mustache"}}]}),
             400, "illegal_argument_exception", "script_lang not supported [mustache]")
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



# ---- if, script, grok, foreach ----

APACHE = ('83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET /presentations/logstash-'
          'monitorama-2013/images/kibana-search.png HTTP/1.1" 200 203023 "http://semicomplete.'
          'com/presentations/logstash-monitorama-2013/" "Mozilla/5.0 (Macintosh; Intel Mac OS X '
          '10_9_1) AppleWebKit/537.36"')
SYSLOG = "Mar  7 04:02:16 web1 sshd[1234]: Accepted publickey for bob"
SYSLOG_PAT = ("%{SYSLOGTIMESTAMP:ts} %{HOSTNAME:host.name} %{WORD:[proc][name]}"
              "\\[%{POSINT:[proc][pid]:int}\\]: %{GREEDYDATA:msg}")


@test
def if_conditions():
    for label, n, nodes in targets():
        procs = [{"set": {"field": "alert", "value": True, "if": "ctx.status == 'error'"}},
                 {"append": {"field": "seen", "value": "x",
                             "if": "ctx.tags != null && ctx.tags.contains('x')"}},
                 {"set": {"field": "deep", "value": 1, "if": "ctx?.a?.b == 1"}},
                 {"set": {"field": "p", "value": 2,
                          "if": {"source": "ctx.n > params.min", "params": {"min": 3}}}},
                 {"set": {"field": "q", "value": 5, "if": "(ctx.n ?: 0) == 0"}}]
        r = simulate(n, {"processors": procs},
                     [{"status": "error", "tags": ["y", "x"], "a": {"b": 1}, "n": 4},
                      {"status": "ok", "n": 3}, {"a": None, "tags": None, "n": 0}])
        eq([d["doc"]["_source"] for d in r],
           [{"status": "error", "tags": ["y", "x"], "a": {"b": 1}, "n": 4, "alert": True,
             "seen": ["x"], "deep": 1, "p": 2},
            {"status": "ok", "n": 3}, {"a": None, "tags": None, "n": 0, "q": 5}],
           label + " conditions true and false")
        # a condition that does not give a boolean fails the document ...
        err = sim_error(n, [{"set": {"field": "x", "value": 1, "if": "ctx.status"}}],
                        {"status": "ok"})
        eq(err["type"], "script_exception", label + " non-boolean type")
        eq(err["reason"].startswith("runtime error: java.lang.String cannot be cast to "
                                    "java.lang.Boolean")
           and "must return a boolean" in err["reason"], True, label + " non-boolean: %r" % err)
        err = sim_error(n, [{"set": {"field": "x", "value": 1, "if": "ctx.a.b == 1"}}], {})
        eq((err["type"], "cannot access field [b]" in err["reason"]),
           ("script_exception", True), label + " field of null without ?.")
        # ... through the processor's on_failure like any failure
        eq(one(n, [{"set": {"field": "x", "value": 1, "if": "ctx.status",
                            "on_failure": [{"set": {"field": "f", "value": "caught"}}]}}],
               {"status": "ok"}), {"status": "ok", "f": "caught"}, label + " on_failure")
        eq(one(n, [{"set": {"field": "x", "value": 1, "if": "ctx.status", "ignore_failure": True}},
                   {"set": {"field": "after", "value": 1}}], {"status": "ok"}),
           {"status": "ok", "after": 1}, label + " ignore_failure")
        # verbose: a skipped processor
        r = simulate(n, {"processors": [
            {"set": {"field": "a", "value": 1, "tag": "t1", "if": "ctx.k == 2"}},
            {"set": {"field": "b", "value": 2, "if": "ctx.k == 1"}},
            {"set": {"field": "c", "value": 3}}]}, [{"k": 1}], "?verbose=true")
        res = r[0]["processor_results"]
        eq([(p["processor_type"], p["status"]) for p in res],
           [("set", "skipped"), ("set", "success"), ("set", "success")], label + " verbose")
        eq((res[0]["tag"], res[0]["if"], "doc" in res[0]),
           ("t1", {"condition": "ctx.k == 2", "result": False}, False), label + " skipped")
        eq((res[1]["if"], res[1]["doc"]["_source"]),
           ({"condition": "ctx.k == 1", "result": True}, {"k": 1, "b": 2}), label + " ran")
        eq(("if" in res[2], res[2]["doc"]["_source"]), (False, {"k": 1, "b": 2, "c": 3}),
           label + " no condition")
        r = simulate(n, {"processors": [
            {"grok": {"field": "k", "patterns": ["^%{WORD:w}$"], "ignore_failure": True}},
            {"set": {"field": "c", "value": 3}}]}, [{"k": "a b"}], "?verbose=true")
        res = r[0]["processor_results"]
        eq([(p["processor_type"], p["status"]) for p in res],
           [("grok", "error_ignored"), ("set", "success")], label + " verbose error_ignored")
        eq((res[0]["ignored_error"]["error"]["reason"], res[0]["doc"]["_source"]),
           ("Provided Grok expressions do not match field value: [a b]", {"k": "a b"}),
           label + " ignored error and the doc")
        # on writes: the pipeline runs where the write arrives
        put_pipeline(n, "cond-w", {"processors": procs[:1] + [
            {"drop": {"if": "ctx.status == 'junk'"}}]})
        st, b = n.bulk([{"index": {"_index": "condw", "_id": "1"}}, {"status": "error"},
                        {"index": {"_index": "condw", "_id": "2"}}, {"status": "ok"},
                        {"index": {"_index": "condw", "_id": "3"}}, {"status": "junk"}],
                       params="?pipeline=cond-w&refresh=true")
        eq((b["errors"], [list(i.values())[0]["result"] for i in b["items"]]),
           (False, ["created", "created", "noop"]), label + " bulk: %s" % b)
        for m in nodes:
            eq(get_source(m, "condw", "1"), {"status": "error", "alert": True}, label + " doc 1")
            eq(get_source(m, "condw", "2"), {"status": "ok"}, label + " doc 2")
            eq(m.req("GET", "/condw/_doc/3")[0], 404, label + " doc 3 dropped")


@test
def script_processor():
    for label, n, nodes in targets():
        put_pipeline(n, "scr", {"processors": [{"script": {
            "tag": "s", "lang": "painless", "params": {"r": "r1", "mul": 10},
            "source": "ctx.total = (ctx.a + ctx.b) * params.mul; ctx._index = 'scr-' + ctx.kind;"
                      " ctx._id = 'n' + ctx._id; ctx._routing = params.r; ctx.remove('kind');"
                      " if (ctx.tags == null) { ctx.tags = [] } ctx.tags.add('s')"}}]})
        n.req("PUT", "/scr-b", {"settings": {"number_of_shards": 4, "number_of_replicas": 0}})
        st, b = n.req("PUT", "/scr-src/_doc/1?pipeline=scr&refresh=true",
                      {"a": 1, "b": 2, "kind": "b"})
        eq((st, b.get("_index"), b.get("_id")), (201, "scr-b", "n1"), label + " put: %s" % b)
        for m in nodes:
            st, b = m.req("GET", "/scr-b/_doc/n1?routing=r1")
            eq((st, b.get("_source")), (200, {"a": 1, "b": 2, "total": 30, "tags": ["s"]}),
               label + " stored")
            eq(m.req("GET", "/scr-src/_doc/1")[0], 404, label + " not in the first index")
        st, b = n.req("POST", "/_ingest/pipeline/scr/_simulate",
                      {"docs": [{"_index": "i", "_id": "7", "_source": {"a": 2, "b": 3,
                                                                        "kind": "c"}}]})
        d = b["docs"][0]["doc"]
        eq((d["_index"], d["_id"], d["_routing"], d["_source"]),
           ("scr-c", "n7", "r1", {"a": 2, "b": 3, "total": 50, "tags": ["s"]}),
           label + " metadata through _simulate")
        # a failing script leaves nothing written; on_failure sees its message
        error_is(n.req("PUT", "/scr-src/_doc/2?pipeline=scr", {"a": 1, "b": "x", "kind": "b",
                                                                "tags": 5}),
                 400, "script_exception", "runtime error")
        for m in nodes:
            eq(m.req("GET", "/scr-b/_doc/n2?routing=r1")[0], 404, label + " nothing written")
        eq(one(n, [{"script": {"source": "ctx.n = ctx.missing.x",
                               "on_failure": [{"set": {"field": "t",
                                                       "value": "{{_ingest.on_failure_processor_type}}"
                                                       }}]}}],
               {"k": 1}), {"k": 1, "t": "script"}, label + " on_failure, untouched doc")
        eq(one(n, [{"script": {"source": "ctx.k2 = ctx.k * 2", "if": "ctx.k > 1"}},
                   {"script": {"source": "ctx.never = 1", "if": "ctx.k > 5"}}], {"k": 3}),
           {"k": 3, "k2": 6}, label + " script with if")


@test
def grok_processor():
    for label, n, nodes in targets():
        eq(one(n, [{"grok": {"field": "message", "patterns": ["%{COMBINEDAPACHELOG}"]}}],
               {"message": APACHE}),
           {"message": APACHE, "clientip": "83.149.9.216", "ident": "-", "auth": "-",
            "timestamp": "17/May/2015:10:05:03 +0000", "verb": "GET",
            "request": "/presentations/logstash-monitorama-2013/images/kibana-search.png",
            "httpversion": "1.1", "response": "200", "bytes": "203023",
            "referrer": '"http://semicomplete.com/presentations/logstash-monitorama-2013/"',
            "agent": '"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36"'},
           label + " apache combined")
        eq(one(n, [{"grok": {"field": "m", "patterns": [
            '%{IPORHOST:ip} %{USER} %{USER} \\[%{HTTPDATE:ts}\\] "%{WORD:verb} %{DATA} '
            'HTTP/%{NUMBER:v:float}" %{NUMBER:status:int} %{NUMBER:bytes:long} %{GREEDYDATA}']}}],
               {"m": APACHE}),
           {"m": APACHE, "ip": "83.149.9.216", "ts": "17/May/2015:10:05:03 +0000",
            "verb": "GET", "v": 1.1, "status": 200, "bytes": 203023}, label + " typed captures")
        eq(one(n, [{"grok": {"field": "m", "patterns": [SYSLOG_PAT]}}], {"m": SYSLOG}),
           {"m": SYSLOG, "ts": "Mar  7 04:02:16", "host": {"name": "web1"},
            "proc": {"name": "sshd", "pid": 1234}, "msg": "Accepted publickey for bob"},
           label + " syslog, nested names")
        eq(one(n, [{"grok": {"field": "m", "patterns": ["%{SYSLOGBASE} %{GREEDYDATA:msg}"]}}],
               {"m": SYSLOG}),
           {"m": SYSLOG, "timestamp": "Mar  7 04:02:16", "logsource": "web1",
            "program": "sshd", "pid": "1234", "msg": "Accepted publickey for bob"},
           label + " SYSLOGBASE")
        procs = [{"grok": {"field": "m", "trace_match": True,
                           "patterns": ["^%{INT:n:int}$", "%{ITEM} is %{COLOR:color}"],
                           "pattern_definitions": {
                               "COLOR": "red|green|blue",
                               "ITEM": "%{WORD:item.name}-%{INT:item.n:int}"}}}]
        r = simulate(n, {"processors": procs}, [{"m": "box-7 is green"}, {"m": "42"}])
        eq([d["doc"]["_source"] for d in r],
           [{"m": "box-7 is green", "item": {"name": "box", "n": 7}, "color": "green"},
            {"m": "42", "n": 42}], label + " pattern_definitions, first match wins")
        eq([d["doc"]["_ingest"]["_grok_match_index"] for d in r], ["1", "0"],
           label + " trace_match")
        # a value no pattern matches: the document fails, or on_failure runs
        err = sim_error(n, procs, {"m": "box is purple"})
        eq((err["type"], err["reason"]),
           ("illegal_argument_exception",
            "Provided Grok expressions do not match field value: [box is purple]"),
           label + " no match")
        eq(one(n, [{"grok": {"field": "m", "patterns": ["^%{INT:n}$"], "on_failure": [
            {"set": {"field": "err", "value": "{{_ingest.on_failure_message}}"}}]}}],
               {"m": "zzz"}),
           {"m": "zzz", "err": "Provided Grok expressions do not match field value: [zzz]"},
           label + " no match through on_failure")
        eq(one(n, [{"grok": {"field": "nope", "patterns": ["%{INT:n}"],
                             "ignore_missing": True}}], {"k": 1}), {"k": 1},
           label + " ignore_missing")
        err = sim_error(n, [{"grok": {"field": "k", "patterns": ["%{INT:n}"]}}], {"k": 5})
        eq(err["reason"], "field [k] of type [java.lang.Integer] cannot be cast to "
           "[java.lang.String]", label + " not a string")
        st, b = n.req("GET", "/_ingest/processor/grok?s=true")
        names = list(b["patterns"])
        eq((st, names == sorted(names), b["patterns"]["USER"],
            b["patterns"]["COMBINEDAPACHELOG"]),
           (200, True, "%{USERNAME}", "%{COMMONAPACHELOG} %{QS:referrer} %{QS:agent}"),
           label + " _ingest/processor/grok")
        eq({"IPV4", "SYSLOGBASE", "TIMESTAMP_ISO8601", "UUID"} <= set(names), True,
           label + " library names")
        error_is(n.req("GET", "/_ingest/processor/grok?ecs_compatibility=v1"), 400,
                 "illegal_argument_exception", "[ecs_compatibility] [v1]")
        # on writes
        put_pipeline(n, "grok-w", {"processors": [
            {"grok": {"field": "m", "patterns": [SYSLOG_PAT]}}, {"remove": {"field": "m"}}]})
        st, b = n.req("PUT", "/grokw/_doc/1?pipeline=grok-w&refresh=true", {"m": SYSLOG})
        eq(st, 201, label + " write: %s" % b)
        error_is(n.req("PUT", "/grokw/_doc/2?pipeline=grok-w", {"m": "nothing"}), 400,
                 "illegal_argument_exception", "Provided Grok expressions do not match")
        for m in nodes:
            eq(get_source(m, "grokw", "1"),
               {"ts": "Mar  7 04:02:16", "host": {"name": "web1"},
                "proc": {"name": "sshd", "pid": 1234}, "msg": "Accepted publickey for bob"},
               label + " stored")
            eq(m.req("GET", "/grokw/_doc/2")[0], 404, label + " failed doc not written")


@test
def foreach_processor():
    for label, n, nodes in targets():
        eq(one(n, [{"foreach": {"field": "names",
                                "processor": {"uppercase": {"field": "_ingest._value"}}}}],
               {"names": ["a", "bc"]}), {"names": ["A", "BC"]}, label + " uppercase")
        eq(one(n, [{"foreach": {"field": "items", "processor": {"grok": {
            "field": "_ingest._value.raw",
            "patterns": ["%{WORD:_ingest._value.k}=%{INT:_ingest._value.v:int}"]}}}}],
               {"items": [{"raw": "a=1"}, {"raw": "b=22"}]}),
           {"items": [{"raw": "a=1", "k": "a", "v": 1}, {"raw": "b=22", "k": "b", "v": 22}]},
           label + " grok inside")
        eq(one(n, [{"foreach": {"field": "v", "processor": {"script": {
            "source": "ctx._ingest._value = ctx._ingest._value * 2; ctx.sum = "
                      "(ctx.sum == null ? 0 : ctx.sum) + ctx._ingest._value"}}}}],
               {"v": [1, 2, 3]}), {"v": [2, 4, 6], "sum": 12}, label + " script inside")
        eq(one(n, [{"foreach": {"field": "v", "processor": {"uppercase": {
            "field": "_ingest._value", "if": "ctx._ingest._value != 'b'"}}}}],
               {"v": ["a", "b"]}), {"v": ["A", "b"]}, label + " if inside")
        # nested failures: the element's error, or its own on_failure
        err = sim_error(n, [{"foreach": {"field": "v", "processor": {
            "uppercase": {"field": "_ingest._value"}}}}], {"v": ["a", 1]})
        eq(err["reason"], "field [_ingest._value] of type [java.lang.Integer] cannot be cast to "
           "[java.lang.String]", label + " nested failure")
        eq(one(n, [{"foreach": {"field": "v", "processor": {"uppercase": {
            "field": "_ingest._value", "on_failure": [
                {"set": {"field": "_ingest._value", "value": "bad"}}]}}}}],
               {"v": ["a", 1]}), {"v": ["A", "bad"]}, label + " nested on_failure")
        # over an object (ES 8): _ingest._key and _ingest._value, a new key renames
        eq(one(n, [{"foreach": {"field": "m", "processor": {"script": {
            "source": "ctx._ingest._value = ctx._ingest._value + 1; "
                      "ctx._ingest._key = 'k_' + ctx._ingest._key"}}}}],
               {"m": {"a": 1, "b": 5}}), {"m": {"k_a": 2, "k_b": 6}}, label + " object")
        err = sim_error(n, [{"foreach": {"field": "v", "processor": {
            "uppercase": {"field": "_ingest._value"}}}}], {"v": "a"})
        eq(err["reason"], "field [v] of type [java.lang.String] cannot be cast to "
           "[java.util.List]", label + " not a list")
        err = sim_error(n, [{"foreach": {"field": "v", "processor": {
            "uppercase": {"field": "_ingest._value"}}}}], {})
        eq(err["reason"], "field [v] not present as part of path [v]", label + " missing")
        err = sim_error(n, [{"foreach": {"field": "v", "processor": {
            "uppercase": {"field": "_ingest._value"}}}}], {"v": None})
        eq(err["reason"], "field [v] is null, cannot loop over its elements.", label + " null")
        eq(one(n, [{"foreach": {"field": "v", "ignore_missing": True, "processor": {
            "uppercase": {"field": "_ingest._value"}}}}], {"k": 1}), {"k": 1},
           label + " ignore_missing")
        put_pipeline(n, "fe-w", {"processors": [{"foreach": {"field": "t", "processor": {
            "lowercase": {"field": "_ingest._value"}}}}]})
        st, b = n.req("PUT", "/few/_doc/1?pipeline=fe-w&refresh=true", {"t": ["X", "Yz"]})
        eq(st, 201, label + " write: %s" % b)
        error_is(n.req("PUT", "/few/_doc/2?pipeline=fe-w", {"t": ["X", 2]}), 400,
                 "illegal_argument_exception", "cannot be cast to [java.lang.String]")
        for m in nodes:
            eq(get_source(m, "few", "1"), {"t": ["x", "yz"]}, label + " stored")
            eq(m.req("GET", "/few/_doc/2")[0], 404, label + " failed doc not written")


if __name__ == "__main__":
    run_tests(budget_s=240, teardown=teardown)
