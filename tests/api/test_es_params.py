"""Parameters and settings Elasticsearch accepts that Shoal once refused or
read differently (issue #26), on a solo node and a 3-node static cluster:
index.refresh_interval given as a JSON number, require_alias and an empty
_id in _bulk, _forcemerge?wait_for_completion=false as a task, the cluster
setting search.default_allow_partial_results, _cat/indices health= / s= on
several columns / column aliases, _cluster/health?level=indices, GET with
version=, ignore_unavailable and allow_no_indices on an index DELETE naming
an alias or a wildcard. Expectations follow Elasticsearch's documented
behaviour."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-es-params-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown


def nodes():
    return (("solo", solo()), ("cluster", cluster()["node-2"]))


def items(b):
    return [(k, v.get("status"), v.get("result"), (v.get("error") or {}).get("type"),
             (v.get("error") or {}).get("reason")) for it in b["items"] for k, v in it.items()]


@test
def refresh_interval_as_a_number():
    for label, n in nodes():
        n.req("DELETE", "/ri")
        st, b = n.req("PUT", "/ri", {"settings": {"index": {"refresh_interval": -1}}})
        eq(st, 200, label + " -1 as a number: %s" % b)
        st, b = n.req("GET", "/ri/_settings")
        eq(b["ri"]["settings"]["index"]["refresh_interval"], "-1", label + " echoed")
        st, b = n.req("PUT", "/ri/_settings", {"index": {"refresh_interval": 0}})
        eq(st, 200, label + " 0 as a number: %s" % b)
        # other numbers have no unit: refused, as ES does
        error_is(n.req("PUT", "/ri/_settings", {"index": {"refresh_interval": 5}}), 400,
                 "illegal_argument_exception",
                 "failed to parse setting [index.refresh_interval] with value [5]")
        st, b = n.req("PUT", "/ri/_settings", {"index.refresh_interval": -1})
        eq(st, 200, label + " dotted -1: %s" % b)
        # -1 means no periodic refresh: a write shows only after a refresh
        st, b = n.req("PUT", "/ri/_doc/1", {"a": 1})
        eq(st, 201, label + " write")
        st, b = n.req("GET", "/ri/_count")
        eq(b["count"], 0, label + " not refreshed")
        n.refresh("ri")
        st, b = n.req("GET", "/ri/_count")
        eq(b["count"], 1, label + " after _refresh")


@test
def bulk_empty_id_fails_its_item_only():
    for label, n in nodes():
        n.req("DELETE", "/be")
        st, b = n.bulk([{"index": {"_index": "be", "_id": ""}}, {"f": 1},
                        {"index": {"_index": "be", "_id": "id"}}, {"f": 2},
                        {"index": {"_index": "be"}}, {"f": 3},
                        {"create": {"_index": "be", "_id": ""}}, {"f": 4},
                        {"index": {"_index": "be", "op_type": "create"}}, {"f": 5}],
                       params="?refresh=true")
        eq(st, 200, label + " bulk: %s" % b)
        eq(b["errors"], True, label + " errors")
        why = "if _id is specified it must not be empty"
        eq(items(b), [("index", 400, None, "illegal_argument_exception", why),
                      ("index", 201, "created", None, None),
                      ("index", 201, "created", None, None),
                      ("create", 400, None, "illegal_argument_exception", why),
                      ("create", 201, "created", None, None)], label + " items")
        st, b = n.req("GET", "/be/_count")
        eq(b["count"], 3, label + " count")
        # an update or delete without an id still fails the request
        st, b = n.bulk([{"delete": {"_index": "be", "_id": ""}}])
        eq(st, 400, label + " delete without an id: %s" % b)


@test
def bulk_require_alias():
    for label, n in nodes():
        for ix in ("backing", "nic1", "nc1", "nic2", "nc2"):
            n.req("DELETE", "/" + ix)
        st, b = n.req("PUT", "/backing", {"aliases": {"ra_alias": {}}})
        eq(st, 200, label + " create: %s" % b)
        why = ("no such index [%s] and [require_alias] request flag is [true] and [%s] "
               "is not an alias")
        st, b = n.bulk([{"index": {"_index": "nic1", "require_alias": True}}, {"f": 1},
                        {"index": {"_index": "nc1"}}, {"f": 2},
                        {"index": {"_index": "ra_alias", "require_alias": True}}, {"f": 3},
                        {"create": {"_index": "ra_alias"}}, {"f": 4},
                        {"index": {"_index": "backing", "require_alias": True}}, {"f": 5}],
                       params="?refresh=true")
        eq(items(b), [("index", 404, None, "index_not_found_exception", why % ("nic1", "nic1")),
                      ("index", 201, "created", None, None),
                      ("index", 201, "created", None, None),
                      ("create", 201, "created", None, None),
                      ("index", 404, None, "index_not_found_exception",
                       why % ("backing", "backing"))], label + " per item")
        st, b = n.bulk([{"index": {"_index": "nic2"}}, {"f": 1},
                        {"index": {"_index": "nc2", "require_alias": False}}, {"f": 2},
                        {"index": {"_index": "ra_alias"}}, {"f": 3}],
                       params="?refresh=true&require_alias=true")
        eq(items(b), [("index", 404, None, "index_not_found_exception", why % ("nic2", "nic2")),
                      ("index", 201, "created", None, None),
                      ("index", 201, "created", None, None)], label + " per request")
        for ix, want in (("nic1", 404), ("nic2", 404), ("nc1", 200), ("nc2", 200)):
            st, _ = n.req("GET", "/" + ix)
            eq(st, want, "%s index %s created?" % (label, ix))
        st, b = n.req("GET", "/backing/_count")
        eq(b["count"], 3, label + " written through the alias")
        st, b = n.bulk([{"index": {"_index": "nc2"}}, {"f": 1}], params="?require_alias=maybe")
        eq(st, 400, label + " require_alias=maybe: %s" % b)


@test
def forcemerge_without_waiting_is_a_task():
    for label, n in nodes():
        n.req("DELETE", "/fm")
        n.req("PUT", "/fm", {"settings": {"number_of_shards": 2, "number_of_replicas": 0}})
        for i in range(3):
            n.req("PUT", "/fm/_doc/%d?refresh=true" % i, {"a": i})
        st, b = n.req("POST", "/fm/_forcemerge?max_num_segments=1&wait_for_completion=false")
        eq(st, 200, label + " accepted: %s" % b)
        tid = b.get("task", "")
        if ":" not in tid:
            raise AssertionError(label + " no task id: %s" % b)
        done = None
        for _ in range(200):
            st, t = n.req("GET", "/_tasks/" + tid)
            if st == 200 and t.get("completed"):
                done = t
                break
            time.sleep(0.1)
        if not done:
            raise AssertionError(label + " task never completed: %s %s" % (st, t))
        eq(done["task"]["action"], "indices:admin/forcemerge", label + " action")
        eq(done["response"]["_shards"]["failed"], 0, label + " response")
        st, b = n.req("POST", "/fm/_forcemerge?wait_for_completion=maybe")
        eq(st, 400, label + " a bad boolean: %s" % b)


@test
def default_allow_partial_results_setting():
    for label, n in nodes():
        for sec in ("transient", "persistent"):
            st, b = n.req("PUT", "/_cluster/settings",
                          {sec: {"search.default_allow_partial_results": False}})
            eq(st, 200, "%s %s: %s" % (label, sec, b))
            st, b = n.req("GET", "/_cluster/settings?flat_settings=true")
            eq(b["transient"].get("search.default_allow_partial_results"), "false",
               label + " shown")
            # a search with every shard answering is not affected
            n.req("PUT", "/pr/_doc/1?refresh=true", {"a": 1})
            st, b = n.req("GET", "/pr/_search")
            eq((st, b["hits"]["total"]["value"]), (200, 1), label + " search")
            st, b = n.req("PUT", "/_cluster/settings",
                          {sec: {"search": {"default_allow_partial_results": None}}})
            eq(st, 200, label + " reset: %s" % b)
            st, b = n.req("GET", "/_cluster/settings?flat_settings=true")
            eq("search.default_allow_partial_results" in b["transient"], False,
               label + " reset shown")
        error_is(n.req("PUT", "/_cluster/settings",
                       {"transient": {"search.default_allow_partial_results": "maybe"}}),
                 400, "illegal_argument_exception")


@test
def cat_indices_health_sort_and_aliases():
    for label, n in nodes():
        for ix in ("cz", "ca", "cm"):
            n.req("DELETE", "/" + ix)
        n.req("PUT", "/cz", {"settings": {"number_of_shards": 1, "number_of_replicas": 0}})
        n.req("PUT", "/ca", {"settings": {"number_of_shards": 2, "number_of_replicas": 0}})
        n.req("PUT", "/cm", {"settings": {"number_of_shards": 1, "number_of_replicas": 0}})
        st, b = n.req("GET", "/_cat/indices/c*?format=json&h=i,h,p&s=p:desc,i")
        eq(st, 200, label + " cat: %s" % b)
        eq([(x["i"], x["h"], x["p"]) for x in b],
           [("ca", "green", "2"), ("cm", "green", "1"), ("cz", "green", "1")],
           label + " aliases as headers, two sort keys")
        st, b = n.req("GET", "/_cat/indices/c*?format=json&h=index&health=green&s=index:desc")
        eq([x["index"] for x in b], ["cz", "cm", "ca"], label + " health=green")
        st, b = n.req("GET", "/_cat/indices/c*?format=json&health=red")
        eq(b, [], label + " health=red")
        error_is(n.req("GET", "/_cat/indices?health=purple"), 400,
                 "illegal_argument_exception")
        st, b = n.req("GET", "/_cat/indices/c*?h=i,dc&v=true&s=i")
        eq(b.splitlines()[0].split(), ["i", "dc"], label + " text headers as asked")


@test
def cluster_health_level_indices():
    for label, n in nodes():
        n.req("DELETE", "/hl")
        n.req("PUT", "/hl", {"settings": {"number_of_shards": 2, "number_of_replicas": 0}})
        st, b = n.req("GET", "/_cluster/health/hl?level=indices&wait_for_status=green&timeout=20s")
        eq(st, 200, label + " health: %s" % b)
        ix = b.get("indices", {}).get("hl")
        if not ix:
            raise AssertionError(label + " no indices.hl: %s" % b)
        eq((ix["status"], ix["number_of_shards"], ix["number_of_replicas"],
            ix["active_primary_shards"], ix["active_shards"], ix["unassigned_shards"]),
           ("green", 2, 0, 2, 2, 0), label + " hl")
        eq(list(b.get("indices", {})), ["hl"], label + " only the named index")


@test
def get_with_version_conflicts():
    for label, n in nodes():
        n.req("DELETE", "/gv")
        n.req("PUT", "/gv/_doc/1", {"a": 1})
        n.req("PUT", "/gv/_doc/1", {"a": 2})
        st, b = n.req("GET", "/gv/_doc/1?version=2")
        eq((st, b.get("_version")), (200, 2), label + " the current version")
        error_is(n.req("GET", "/gv/_doc/1?version=1"), 409,
                 "version_conflict_engine_exception",
                 "[1]: version conflict, current version [2] is different than the one "
                 "provided [1]")
        st, b = n.req("GET", "/gv/_doc/nope?version=1")
        eq((st, b.get("found")), (404, False), label + " missing stays 404")


@test
def delete_index_alias_and_wildcard_options():
    for label, n in nodes():
        n.req("DELETE", "/dx")
        n.req("PUT", "/dx", {"aliases": {"dxalias": {}}})
        error_is(n.req("DELETE", "/dxalias"), 400, "illegal_argument_exception",
                 "matches an alias")
        st, b = n.req("DELETE", "/dxalias?ignore_unavailable=true")
        eq(st, 200, label + " alias passed over: %s" % b)
        eq(n.req("GET", "/dx")[0], 200, label + " index kept (alias)")
        # a wildcard selects indices, never through an alias
        st, b = n.req("DELETE", "/dxali*")
        eq(st, 200, label + " wildcard matching only an alias: %s" % b)
        eq(n.req("GET", "/dx")[0], 200, label + " index kept (wildcard)")
        error_is(n.req("DELETE", "/dxali*?allow_no_indices=false"), 404,
                 "index_not_found_exception")
        st, b = n.req("DELETE", "/nothing-here?ignore_unavailable=true")
        eq(st, 200, label + " a missing index ignored: %s" % b)
        st, b = n.req("DELETE", "/dx*")
        eq(st, 200, label + " the index by wildcard")
        eq(n.req("GET", "/dx")[0], 404, label + " gone")



@test
def get_realtime_false_reads_the_last_refresh():
    # ?realtime=false reads what a search sees: nothing written since the
    # last refresh (a new doc, a new version, a delete); ?refresh=true on
    # the get refreshes first
    for label, n in nodes():
        n.req("DELETE", "/rtf")
        st, b = n.req("PUT", "/rtf", {"settings": {"index": {
            "refresh_interval": -1, "number_of_shards": 2}}})
        eq(st, 200, label + " create: %s" % b)
        n.req("PUT", "/rtf/_doc/1", {"v": 1})
        eq(n.req("GET", "/rtf/_doc/1?realtime=false")[0], 404, label + " not refreshed")
        eq(n.req("HEAD", "/rtf/_doc/1?realtime=false")[0], 404, label + " HEAD")
        eq(n.req("GET", "/rtf/_source/1?realtime=false")[0], 404, label + " _source")
        st, b = n.req("POST", "/rtf/_mget?realtime=false", {"ids": ["1"]})
        eq(b["docs"][0]["found"], False, label + " mget: %s" % b)
        st, b = n.req("GET", "/rtf/_doc/1")
        eq((st, b["_source"]), (200, {"v": 1}), label + " realtime")
        st, b = n.req("GET", "/rtf/_doc/1?realtime=false&refresh=true")
        eq((st, b.get("_version"), b.get("_source")), (200, 1, {"v": 1}),
           label + " refreshed first: %s" % b)
        n.req("PUT", "/rtf/_doc/1", {"v": 2})
        st, b = n.req("GET", "/rtf/_doc/1?realtime=false")
        eq((st, b["_version"], b["_seq_no"], b["_source"]), (200, 1, 0, {"v": 1}),
           label + " old version: %s" % b)
        st, b = n.req("POST", "/rtf/_mget?realtime=false", {"ids": ["1"]})
        eq((b["docs"][0]["_version"], b["docs"][0]["_source"]), (1, {"v": 1}),
           label + " mget old version: %s" % b)
        eq(n.req("GET", "/rtf/_doc/1")[1]["_version"], 2, label + " realtime version")
        n.req("DELETE", "/rtf/_doc/1")
        eq(n.req("GET", "/rtf/_doc/1?realtime=false")[0], 200, label + " delete not refreshed")
        eq(n.req("GET", "/rtf/_doc/1")[0], 404, label + " deleted, realtime")
        n.req("POST", "/rtf/_refresh")
        eq(n.req("GET", "/rtf/_doc/1?realtime=false")[0], 404, label + " deleted, refreshed")
        n.req("DELETE", "/rtf")


@test
def put_settings_preserve_existing():
    # only the settings an index has not set yet change; nested, flat and
    # unprefixed keys alike
    for label, n in nodes():
        for ix in ("pe1", "pe2"):
            n.req("DELETE", "/" + ix)
        eq(n.req("PUT", "/pe1", {"settings": {"index": {
            "number_of_replicas": 0, "refresh_interval": "5s"}}})[0], 200, label)
        eq(n.req("PUT", "/pe2", {"settings": {"index": {"number_of_replicas": 0}}})[0], 200,
           label)
        st, b = n.req("PUT", "/pe1/_settings?preserve_existing=true", {
            "index.number_of_replicas": 1, "refresh_interval": "9s",
            "index": {"translog": {"durability": "async"}}, "max_result_window": 20000})
        eq(st, 200, label + " preserve_existing: %s" % b)
        s = n.req("GET", "/pe1/_settings?flat_settings=true")[1]["pe1"]["settings"]
        eq((s["index.number_of_replicas"], s["index.refresh_interval"],
            s["index.translog.durability"], s["index.max_result_window"]),
           ("0", "5s", "async", "20000"), label + " kept and added: %s" % s)
        # without it, everything given is set
        st, b = n.req("PUT", "/pe1/_settings", {"index.refresh_interval": "9s"})
        s = n.req("GET", "/pe1/_settings?flat_settings=true")[1]["pe1"]["settings"]
        eq(s["index.refresh_interval"], "9s", label + " plain update")
        # the same update over two indices leaves each its own
        st, b = n.req("PUT", "/pe2/_settings?preserve_existing=true",
                      {"index.refresh_interval": "7s"})
        eq(st, 200, label + " pe2: %s" % b)
        s = n.req("GET", "/pe2/_settings?flat_settings=true")[1]["pe2"]["settings"]
        eq(s["index.refresh_interval"], "7s", label + " pe2 set")
        for ix in ("pe1", "pe2"):
            n.req("DELETE", "/" + ix)


@test
def external_gte_versions_and_create():
    # external_gte takes an equal version (external does not); _create
    # refuses external versioning before looking at the version
    for label, n in nodes():
        n.req("DELETE", "/egv")
        st, b = n.req("PUT", "/egv/_doc/1?version_type=external_gte&version=5", {"a": 1})
        eq((st, b.get("_version")), (201, 5), label + " first: %s" % b)
        st, b = n.req("PUT", "/egv/_doc/1?version_type=external_gte&version=5", {"a": 2})
        eq((st, b.get("_version"), b.get("result")), (200, 5, "updated"),
           label + " equal, gte: %s" % b)
        st, b = n.req("PUT", "/egv/_doc/1?version_type=external&version=5", {"a": 3})
        eq((st, b["error"]["reason"]), (409, "[1]: version conflict, current version [5] is "
                                             "higher or equal to the one provided [5]"),
           label + " equal, external: %s" % b)
        st, b = n.req("PUT", "/egv/_doc/1?version_type=external_gte&version=4", {"a": 3})
        eq((st, b["error"]["reason"]), (409, "[1]: version conflict, current version [5] is "
                                             "higher than the one provided [4]"),
           label + " lower, gte: %s" % b)
        st, b = n.req("DELETE", "/egv/_doc/1?version_type=external_gte&version=6")
        eq((st, b.get("_version")), (200, 6), label + " delete: %s" % b)
        st, b = n.req("PUT", "/egv/_doc/1?version_type=external_gte&version=6", {"a": 4})
        eq((st, b.get("_version")), (201, 6), label + " over its tombstone: %s" % b)
        lines = [{"index": {"_index": "egv", "_id": "1", "version": 6,
                            "version_type": "external_gte"}}, {"a": 5}]
        st, b = n.bulk(lines)
        eq((b["items"][0]["index"]["status"], b["items"][0]["index"].get("_version")),
           (200, 6), label + " bulk, equal, gte: %s" % b)
        for v in (0, 7):
            st, b = n.req("PUT", "/egv/_create/2?version_type=external&version=%d" % v, {})
            eq((st, b["error"]["reason"]),
               (400, "Validation Failed: 1: create operations only support internal "
                     "versioning. use index instead;"), label + " _create v%d: %s" % (v, b))
        n.req("DELETE", "/egv")


@test
def external_version_zero():
    # ES's external versions start at 0: 0 is a version (not "none"), kept
    # by GET and the copies, and an internal write after it makes 1
    for label, n in nodes():
        n.req("DELETE", "/ev0")
        st, b = n.req("PUT", "/ev0/_doc/1?version_type=external&version=0", {"a": 1})
        eq((st, b.get("_version"), b.get("result")), (201, 0, "created"), label + ": %s" % b)
        for i in range(3):  # GET may be answered by any copy
            st, b = n.req("GET", "/ev0/_doc/1")
            eq((st, b.get("_version")), (200, 0), label + " get: %s" % b)
        st, b = n.req("PUT", "/ev0/_doc/1?version_type=external&version=0", {"a": 2})
        eq((st, b["error"]["reason"]), (409, "[1]: version conflict, current version [0] is "
                                             "higher or equal to the one provided [0]"),
           label + " again: %s" % b)
        st, b = n.req("PUT", "/ev0/_doc/1?version_type=external_gte&version=0", {"a": 3})
        eq((st, b.get("_version"), b.get("result")), (200, 0, "updated"), label + " gte: %s" % b)
        st, b = n.req("PUT", "/ev0/_doc/1", {"a": 4})
        eq((st, b.get("_version")), (200, 1), label + " internal after: %s" % b)
        st, b = n.bulk([{"index": {"_index": "ev0", "_id": "2", "version": 0,
                                   "version_type": "external"}}, {"a": 5}])
        eq((b["items"][0]["index"]["status"], b["items"][0]["index"].get("_version")),
           (201, 0), label + " bulk: %s" % b)
        st, b = n.req("POST", "/ev0/_doc?version_type=external&version=0", {"a": 6})
        eq((st, b["error"]["reason"]), (400, "Validation Failed: 1: an id must be provided if "
                                             "version type or value are set;"),
           label + " no id: %s" % b)
        st, b = n.req("POST", "/ev0/_update/2?version_type=external&version=0",
                      {"doc": {"a": 7}})
        eq((st, b["error"]["reason"]),
           (400, "Validation Failed: 1: can't provide version in update request.;"),
           label + " update: %s" % b)
        n.req("DELETE", "/ev0")


@test
def update_and_explain_return_the_source_asked_for():
    # _source on an update (URL, bulk item or body) and on _explain gives
    # the document back as "get", filtered as asked
    for label, n in nodes():
        n.req("DELETE", "/usg")
        st, b = n.req("POST", "/usg/_update/1?_source=foo,bar&refresh=true",
                      {"doc": {"foo": "baz"}, "upsert": {"foo": "bar", "x": 1.10}})
        eq((st, b.get("get")), (201, {"_seq_no": 0, "_primary_term": 1, "found": True,
                                     "_source": {"foo": "bar"}}), label + " upsert: %s" % b)
        st, b = n.req("POST", "/usg/_update/1", {"doc": {"foo": "baz"},
                                                 "_source": {"excludes": ["foo"]}})
        eq((st, b["result"], b["get"]["_source"]), (200, "updated", {"x": 1.10}),
           label + " body _source: %s" % b)
        st, b = n.req("POST", "/usg/_update/1", {"doc": {"foo": "baz"}, "_source": True})
        eq((b["result"], b["get"]["_source"]), ("noop", {"foo": "baz", "x": 1.10}),
           label + " noop: %s" % b)
        st, b = n.req("POST", "/usg/_update/1", {"doc": {"foo": "q"}})
        eq("get" in b, False, label + " not asked: %s" % b)
        st, b = n.bulk([{"update": {"_index": "usg", "_id": "1", "_source": ["foo"]}},
                        {"doc": {"foo": "w"}},
                        {"update": {"_index": "usg", "_id": "2"}},
                        {"doc": {"foo": "v"}, "doc_as_upsert": True, "_source": True}],
                       params="?refresh=true")
        items = [i["update"] for i in b["items"]]
        eq([i.get("get", {}).get("_source") for i in items], [{"foo": "w"}, {"foo": "v"}],
           label + " bulk: %s" % b)
        st, b = n.bulk([{"update": {"_index": "usg", "_id": "2"}}, {"doc": {"y": 2}}],
                       params="?_source_includes=y")
        eq(b["items"][0]["update"]["get"]["_source"], {"y": 2}, label + " bulk URL: %s" % b)
        n.req("POST", "/usg/_refresh")
        st, b = n.req("POST", "/usg/_explain/1?_source_includes=x",
                      {"query": {"match_all": {}}})
        eq((st, b["matched"], b["get"]["found"], b["get"]["_source"]), (200, True, True,
                                                                        {"x": 1.10}),
           label + " explain: %s" % b)
        st, b = n.req("POST", "/usg/_explain/1?_source=false", {"query": {"match_all": {}}})
        eq("get" in b, False, label + " explain without: %s" % b)
        n.req("DELETE", "/usg")


@test
def mget_source_include_exclude_spellings():
    # a doc's _source in _mget takes include/exclude as well as
    # includes/excludes, each a list or a string
    for label, n in nodes():
        n.req("DELETE", "/msf")
        n.req("PUT", "/msf/_doc/1?refresh=true",
              {"include": {"field1": "v1", "field2": "v2"}, "count": 1})
        st, b = n.req("POST", "/_mget", {"docs": [
            {"_index": "msf", "_id": "1", "_source": {"include": "include.field1"}},
            {"_index": "msf", "_id": "1", "_source": {"include": ["include.field1"]}},
            {"_index": "msf", "_id": "1", "_source": {"include": ["include"],
                                                      "exclude": ["*.field2"]}},
            {"_index": "msf", "_id": "1", "_source": {"excludes": "include"}}]})
        eq([d["_source"] for d in b["docs"]],
           [{"include": {"field1": "v1"}}] * 3 + [{"count": 1}], label + ": %s" % b)
        n.req("DELETE", "/msf")


@test
def allow_no_indices_false_per_wildcard():
    # every wildcard of the expression must select an index, not only the
    # expression as a whole; an index DELETE's wildcards never select aliases
    for label, n in nodes():
        for ix in ("anw1", "anw2"):
            n.req("DELETE", "/" + ix)
        n.req("PUT", "/anw1", {"aliases": {"anwalias": {}}})
        n.req("PUT", "/anw2", {})
        st, b = n.req("DELETE", "/anw2,anwali*?allow_no_indices=false")
        eq((st, b["error"]["type"]), (404, "index_not_found_exception"), label + ": %s" % b)
        eq(n.req("HEAD", "/anw2")[0], 200, label + " nothing deleted")
        st, b = n.req("GET", "/anw2,nomatch*/_settings?allow_no_indices=false")
        eq(st, 404, label + " get settings: %s" % b)
        st, b = n.req("GET", "/anw2,nomatch*/_settings")
        eq((st, list(b)), (200, ["anw2"]), label + " allowed: %s" % b)
        for ix in ("anw1", "anw2"):
            n.req("DELETE", "/" + ix)


@test
def get_stored_fields():
    # stored_fields on GET and _mget: fields mapped with "store": true come
    # back under "fields" (values as _source holds them); _source only when
    # named there or asked for; a field not stored is left out
    for label, n in nodes():
        n.req("DELETE", "/gsf")
        st, b = n.req("PUT", "/gsf", {"mappings": {"properties": {
            "foo": {"type": "keyword", "store": True}, "count": {"type": "integer",
                                                                  "store": True},
            "plain": {"type": "keyword"}, "o": {"properties": {"t": {"type": "text",
                                                                     "store": True}}}}}})
        eq(st, 200, label + ": %s" % b)
        props = n.req("GET", "/gsf/_mapping")[1]["gsf"]["mappings"]["properties"]
        eq((props["foo"].get("store"), props["plain"].get("store")), (True, None),
           label + " echoed: %s" % props)
        n.req("PUT", "/gsf/_doc/1", {"foo": "bar", "count": 1, "plain": "p",
                                     "o": [{"t": "x"}, {"t": "y"}]})
        st, b = n.req("GET", "/gsf/_doc/1?stored_fields=foo,count,plain,o.t")
        eq((b.get("fields"), "_source" in b), ({"foo": ["bar"], "count": [1],
                                                "o.t": ["x", "y"]}, False),
           label + " get: %s" % b)
        st, b = n.req("GET", "/gsf/_doc/1?stored_fields=count,_source")
        eq((b.get("fields"), b["_source"]["foo"]), ({"count": [1]}, "bar"), label + " _source")
        st, b = n.req("GET", "/gsf/_doc/1?stored_fields=count&_source=true")
        eq("_source" in b, True, label + " _source asked: %s" % b)
        st, b = n.req("POST", "/gsf/_mget", {"docs": [{"_id": "1", "stored_fields": ["foo"]},
                                                      {"_id": "1"}]})
        eq([(d.get("fields"), "_source" in d) for d in b["docs"]],
           [({"foo": ["bar"]}, False), (None, True)], label + " mget: %s" % b)
        st, b = n.req("PUT", "/gsf/_mapping", {"properties": {"foo": {"type": "keyword"}}})
        eq(st, 400, label + " store cannot change: %s" % b)
        n.req("DELETE", "/gsf")


@test
def indices_boost_with_ignore_unavailable():
    for label, n in nodes():
        for ix in ("ib1", "ib2"):
            n.req("DELETE", "/" + ix)
            n.req("PUT", "/%s/_doc/1?refresh=true" % ix, {"t": "x"})
        body = {"query": {"match": {"t": "x"}},
                "indices_boost": [{"nonexistent": 2.0}, {"ib1": 1.0}, {"ib2": 2.0}]}
        st, b = n.req("POST", "/ib1,ib2/_search", body)
        eq(st, 404, label + " unknown name: %s" % b)
        st, b = n.req("POST", "/ib1,ib2/_search?ignore_unavailable=true", body)
        eq((st, [h["_index"] for h in b["hits"]["hits"]]), (200, ["ib2", "ib1"]),
           label + ": %s" % b)
        for ix in ("ib1", "ib2"):
            n.req("DELETE", "/" + ix)

@test
def search_stats_groups():
    """A search's "stats" groups are counted per index and shown by
    _stats?groups= (names, lists and wildcards), only when asked for."""
    for label, n in nodes():
        n.req("DELETE", "/sg")
        st, b = n.req("PUT", "/sg", {"settings": {"number_of_shards": 2}})
        eq(st, 200, label + " create: %s" % b)
        n.req("PUT", "/sg/_doc/1?refresh=true", {"bar": "bar"})
        st, b = n.req("POST", "/sg/_search", {"stats": ["bar", "baz"]})
        eq(st, 200, label + " search with stats: %s" % b)
        st, b = n.req("POST", "/sg/_search?stats=bar", {})
        eq(st, 200, label + " search with ?stats=: %s" % b)
        st, b = n.req("GET", "/sg/_stats")
        eq("groups" in b["_all"]["total"]["search"], False, label + " no groups unless asked")
        st, b = n.req("GET", "/sg/_stats/search?groups=*r")
        g = b["indices"]["sg"]["total"]["search"]["groups"]
        eq(sorted(g), ["bar"], label + " *r")
        # two searches named bar, each over 2 shards
        eq((g["bar"]["query_total"], g["bar"]["fetch_total"]), (4, 4), label + " bar counted")
        st, b = n.req("GET", "/_stats?groups=bar,baz")
        g = b["_all"]["primaries"]["search"]["groups"]
        eq({k: v["query_total"] for k, v in g.items()}, {"bar": 4, "baz": 2}, label + " list")
        st, b = n.req("POST", "/sg/_search", {"stats": "bar"})
        error_is((st, b), 400, "parsing_exception", "[stats] must be an array of strings")
        n.req("DELETE", "/sg")


if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
