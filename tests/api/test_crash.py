"""kill -9 the node while bulk requests stream in; restart; every
acknowledged write is there with its version and its content, and nothing
that was never sent appears. Several rounds on one data directory."""
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import Node, eq, run_tests, test  # noqa: E402

IDS = 3000          # id space: writers overwrite ids, so versions climb
BATCH = 60
WRITERS = 3


class Writer(threading.Thread):
    """Sends bulks until the node dies. Records, per id, the (version, gen)
    of every acknowledged write, and the ids of the request in flight."""

    def __init__(self, node, seed, acked, lock):
        super().__init__(daemon=True)
        self.port = node.port
        self.rng = random.Random(seed)
        self.acked = acked
        self.lock = lock
        self.inflight = {}   # id -> gen of the unacknowledged request
        self.sent = 0
        self.seed = seed

    def run(self):
        m = Node(data="/nonexistent", start=False)
        m.port = self.port
        gen = 0
        try:
            while True:
                lines = []
                batch = {}
                for _ in range(BATCH):
                    i = str(self.rng.randrange(IDS))
                    if i in batch:
                        continue
                    gen += 1
                    tag = "%d-%d" % (self.seed, gen)
                    batch[i] = tag
                    if self.rng.random() < 0.1:
                        lines.append({"delete": {"_id": i}})
                        batch[i] = None
                    else:
                        lines.append({"index": {"_id": i}})
                        lines.append({"tag": tag, "n": gen, "body": "x" * self.rng.randrange(200)})
                self.inflight = batch
                st, b = m.bulk(lines, "/crash/_bulk")
                if st != 200:
                    raise RuntimeError("bulk status %s: %s" % (st, b))
                with self.lock:
                    for item in b["items"]:
                        (op, r), = item.items()
                        if r["status"] >= 300 and not (op == "delete" and r["status"] == 404):
                            raise RuntimeError("item failed: %s" % r)
                        tag = batch[r["_id"]]
                        # concurrent writers answer out of order: the
                        # write with the highest seq_no is the current one
                        prev = self.acked.get(r["_id"])
                        if prev is None or r["_seq_no"] > prev[2]:
                            self.acked[r["_id"]] = (r["_version"], tag, r["_seq_no"])
                self.inflight = {}
                self.sent += 1
        except (OSError, ConnectionError, json.JSONDecodeError):
            pass  # the node was killed


@test
def kill9_during_bulk_stream():
    with Node() as n:
        st, b = n.req("PUT", "/crash", {"settings": {"number_of_shards": 3,
                                                      "number_of_replicas": 0,
                                                      "refresh_interval": "200ms"}})
        eq(st, 200)
        acked = {}
        lock = threading.Lock()
        rng = random.Random(7)
        total_acked_requests = 0
        for rnd in range(3):
            writers = [Writer(n, rnd * 100 + k, acked, lock) for k in range(WRITERS)]
            for w in writers:
                w.start()
            time.sleep(1.0 + rng.random() * 1.5)
            n.kill()
            for w in writers:
                w.join(30)
                assert not w.is_alive(), "writer stuck after kill"
            total_acked_requests += sum(w.sent for w in writers)
            inflight = {}
            for w in writers:
                for i, tag in w.inflight.items():
                    inflight.setdefault(i, []).append(tag)
            n.start()
            n.refresh("crash")
            # every id ever acknowledged: present with its version and content
            ids = sorted(set(acked) | set(inflight), key=int)
            got = {}
            for k in range(0, len(ids), 500):
                st, b = n.req("POST", "/crash/_mget", {"ids": ids[k:k + 500]})
                eq(st, 200)
                for d in b["docs"]:
                    got[d["_id"]] = d
            bad = []
            for i in ids:
                version, tag, seq = acked.get(i, (None, None, -1))
                d = got[i]
                if i in inflight:
                    # an unacknowledged write may or may not have landed,
                    # but then it landed whole, right after the acked one
                    ok_tags = [tag] + inflight[i]
                    cur = d["_source"]["tag"] if d["found"] else None
                    if cur not in ok_tags:
                        bad.append((i, "inflight", acked.get(i), d))
                    elif cur == tag and tag is not None and d["_version"] != version:
                        bad.append((i, "version", acked.get(i), d))
                    continue
                if tag is None:
                    if d["found"]:
                        bad.append((i, "deleted doc came back", acked[i], d))
                    continue
                if not d["found"] or d["_source"]["tag"] != tag or d["_version"] != version:
                    bad.append((i, "lost or wrong", acked[i], d))
            eq(bad[:5], [], "round %d: acknowledged writes after kill -9" % rnd)
            # an in-flight write that landed is the state the next round builds on
            for i in inflight:
                d = got.get(i)
                if d is None:
                    continue
                prev_seq = acked[i][2] if i in acked else -1
                if d["found"]:
                    acked[i] = (d["_version"], d["_source"]["tag"], d["_seq_no"])
                else:
                    acked[i] = (None, None, prev_seq)
            # nothing that was never written
            st, b = n.req("POST", "/crash/_search", {"size": 0, "track_total_hits": True})
            live_acked = sum(1 for i in acked if acked[i][1] is not None)
            total = b["hits"]["total"]["value"]
            slack = sum(len(v) for v in inflight.values())
            assert abs(total - live_acked) <= slack, (total, live_acked, slack)
            # the search view agrees with the realtime view
            st, b = n.req("POST", "/crash/_search", {"size": 0, "query": {"ids": {"values": ids}}})
            found = sum(1 for d in got.values() if d["found"])
            eq(b["hits"]["total"]["value"], found, "searchable == gettable")
        assert total_acked_requests >= 3, "writers made progress (%d)" % total_acked_requests
        print("  %d acknowledged bulk requests, %d ids, 3 kill -9 rounds" %
              (total_acked_requests, len(acked)))


@test
def kill9_single_doc_writes_and_updates():
    """Single-document writes and _update: each acknowledged one survives."""
    with Node() as n:
        n.req("PUT", "/c2", {"settings": {"number_of_replicas": 0}})
        expect = {}
        stop = time.time() + 1.5
        i = 0
        while time.time() < stop:
            i += 1
            doc = str(i % 50)
            if i % 3 == 0 and doc in expect:
                st, b = n.req("POST", "/c2/_update/%s" % doc, {"doc": {"u": i}})
                eq(st, 200)
                expect[doc] = (b["_version"], expect[doc][1], i)
            else:
                st, b = n.req("PUT", "/c2/_doc/%s" % doc, {"v": i})
                assert st in (200, 201), (st, b)
                expect[doc] = (b["_version"], i, None)
        n.kill()
        n.start()
        for doc, (ver, v, u) in expect.items():
            st, b = n.req("GET", "/c2/_doc/%s" % doc)
            eq((st, b["_version"], b["_source"]["v"]), (200, ver, v), "doc %s" % doc)
            if u is not None:
                eq(b["_source"]["u"], u)


if __name__ == "__main__":
    run_tests(budget_s=110)
