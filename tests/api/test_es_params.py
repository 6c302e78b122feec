"""Parameters and settings Elasticsearch accepts that Shoal once refused or
read differently (issue #26), on a solo node and a 3-node static cluster:
index.refresh_interval given as a JSON number, require_alias and an empty
_id in _bulk. Expectations follow Elasticsearch's documented behaviour."""
import os
import sys

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


if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
