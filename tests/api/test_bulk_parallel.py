"""_bulk into one shard from several streams at once, each request large
enough to be split into parts that are analyzed into indexing buffers of
their own on the node's index pool: every item's answer, the realtime GETs
and the searchable state after a refresh agree with the history the
answers themselves give (per id, the acknowledged op with the highest
_seq_no wins), also after kill -9 and a restart. Conditional writes
(if_seq_no, op_type=create) are judged against the id's state as the
answers order it. The indexing buffers show in _stats while they hold
documents."""
import json
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node, eq, run_tests, test  # noqa: E402

IDS = 400
STREAMS = 3
ROUNDS = 6
PER_REQUEST = 700  # several parts of 64+ ops each
NODE = None
OPS = []  # (seq_no, id, kind, source or None), acknowledged
LOCK = threading.Lock()


def node():
    global NODE
    if NODE is None:
        NODE = Node()
        st, b = NODE.req("PUT", "/p", {
            "settings": {"number_of_shards": 1, "number_of_replicas": 0,
                         "refresh_interval": "-1"},
            "mappings": {"properties": {"k": {"type": "keyword"}, "n": {"type": "long"},
                                        "body": {"type": "text"},
                                        "c": {"type": "nested",
                                              "properties": {"a": {"type": "keyword"}}}}}})
        eq(st, 200, "create: %s" % b)
    return NODE


def source(rnd, i):
    if rnd.random() < 0.15:
        return {"k": "v%d" % rnd.randrange(9), "n": i,
                "c": [{"a": "x%d" % rnd.randrange(5)}, {"a": "y"}]}
    return {"k": "v%d" % rnd.randrange(9), "n": i, "body": "fox %d dog %d" % (rnd.randrange(40), i)}


def stream(w, errors):
    rnd = random.Random(100 + w)
    n = Node(start=False)
    n.port = NODE.port
    try:
        for r in range(ROUNDS):
            lines, sent = [], []
            for i in range(PER_REQUEST):
                doc_id = "d%d" % rnd.randrange(IDS)
                x = rnd.random()
                if x < 0.15:
                    lines.append({"delete": {"_index": "p", "_id": doc_id}})
                    sent.append((doc_id, "delete", None))
                elif x < 0.18:
                    # refused while parsing: never acknowledged
                    src = {"n": "not a number"}
                    lines += [{"index": {"_index": "p", "_id": doc_id}}, src]
                    sent.append((doc_id, "bad", src))
                else:
                    src = source(rnd, w * 100000 + r * 1000 + i)
                    lines += [{"index": {"_index": "p", "_id": doc_id}}, src]
                    sent.append((doc_id, "index", src))
            st, b = n.bulk(lines)
            if st != 200:
                errors.append("stream %d: %s %s" % (w, st, str(b)[:300]))
                return
            for (doc_id, kind, src), item in zip(sent, b["items"]):
                res = item.get("index") or item.get("delete")
                if kind == "bad":
                    if res.get("status") != 400:
                        errors.append("bad doc acknowledged: %s" % res)
                    continue
                if res.get("status") not in (200, 201, 404) or "error" in res:
                    errors.append("item failed: %s" % res)
                    continue
                with LOCK:
                    OPS.append((res["_seq_no"], doc_id, kind, src, res["_version"]))
    finally:
        n.close_conn()


def expected():
    """id -> (seq_no, source) of the winning op, None when deleted."""
    last = {}
    for seq, doc_id, kind, src, ver in sorted(OPS, key=lambda o: o[0]):
        last[doc_id] = (seq, src if kind == "index" else None)
    return last


def check_state(n, what):
    exp = expected()
    # every seq_no handed out once
    seqs = sorted(o[0] for o in OPS)
    eq(len(seqs), len(set(seqs)), "%s: distinct seq_nos" % what)
    live = 0
    for doc_id, (seq, src) in sorted(exp.items()):
        st, b = n.req("GET", "/p/_doc/%s" % doc_id)
        if src is None:
            eq(st, 404, "%s: %s deleted at seq %d: %s" % (what, doc_id, seq, b))
            continue
        live += 1
        eq(st, 200, "%s: get %s" % (what, doc_id))
        eq((b["_seq_no"], b["_source"]), (seq, src), "%s: %s" % (what, doc_id))
    n.refresh("p")
    st, b = n.req("GET", "/p/_count")
    eq(b["count"], live, "%s: count" % what)
    # the searchable copy of every live doc is its last version
    st, b = n.req("POST", "/p/_search", {"size": IDS, "query": {"match_all": {}},
                                         "seq_no_primary_term": True})
    got = {h["_id"]: (h["_seq_no"], h["_source"]) for h in b["hits"]["hits"]}
    want = {k: v for k, v in exp.items() if v[1] is not None}
    eq(got, want, "%s: search" % what)
    # nested objects of live docs only
    st, b = n.req("POST", "/p/_search", {"size": 0, "query": {
        "nested": {"path": "c", "query": {"term": {"c.a": "y"}}}}})
    eq(b["hits"]["total"]["value"],
       sum(1 for v in want.values() if "c" in v[1]), "%s: nested" % what)


@test
def streams_into_one_shard():
    n = node()
    errors = []
    th = [threading.Thread(target=stream, args=(w, errors)) for w in range(STREAMS)]
    for t in th:
        t.start()
    for t in th:
        t.join(300)
    eq(errors[:3], [], "stream errors")
    eq(len(OPS) > STREAMS * ROUNDS * PER_REQUEST // 2, True, "acknowledged ops")
    # before any refresh the buffers hold the docs
    st, b = n.req("GET", "/p/_stats")
    mem = b["indices"]["p"]["primaries"]["segments"]["index_writer_memory_in_bytes"]
    eq(mem > 0, True, "index_writer_memory_in_bytes %s" % mem)
    check_state(n, "live")


@test
def survives_kill_and_restart():
    n = node()
    # more writes that only the log holds, then kill -9
    errors = []
    stream(7, errors)
    eq(errors[:3], [], "stream errors")
    n.kill()
    n.start()
    check_state(n, "after kill -9")


@test
def dynamic_fields_from_parallel_parsing():
    """A bulk's documents are parsed under their mappings on the node's
    index pool at once: every new dynamic field any of them brings is
    merged, none lost to a concurrent merge, and a clash is that document's
    own 400 while the others go in."""
    n = node()
    lines = []
    for i in range(1500):  # 400 new text fields (and their .keyword): under the
        # index.mapping.total_fields.limit of 1,000
        doc = {"shared": i, "f%d" % (i % 400): "v%d" % i, "o": {"g%d" % (i % 37): i}}
        lines += [{"index": {"_index": "dyn", "_id": str(i)}}, doc]
    # one document clashes: "shared" is a long in every other one
    lines += [{"index": {"_index": "dyn", "_id": "clash"}}, {"shared": {"an": "object"}}]
    st, b = n.bulk(lines, params="?refresh=true")
    eq(st, 200, "bulk")
    bad = [it["index"] for it in b["items"] if it["index"].get("status") not in (200, 201)]
    eq([x["_id"] for x in bad], ["clash"], "only the clashing document fails: %s" % bad[:2])
    eq(bad[0]["status"], 400, "the clash is a 400")
    st, m = n.req("GET", "/dyn/_mapping")
    props = m["dyn"]["mappings"]["properties"]
    eq(sorted(k for k in props if k.startswith("f")), sorted("f%d" % i for i in range(400)),
       "every dynamic field in the mapping")
    eq(len(props["o"]["properties"]), 37, "every sub-field of the object")
    eq(props["shared"]["type"], "long", "the shared field")
    st, c = n.req("GET", "/dyn/_count?q=f34:v1234")
    eq(c["count"], 1, "a dynamic field is searchable")


def teardown():
    return NODE.cleanup() if NODE else 0


if __name__ == "__main__":
    run_tests(budget_s=240, teardown=teardown)
