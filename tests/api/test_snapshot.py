"""Snapshots and restore (issue #12) against real processes: a 3-node
cluster and solo nodes sharing one path.repo.

  - repositories: locations outside path.repo, ".." and symlink escapes
    are refused (400 repository_exception); a repository registered on one
    node is known to every node; _verify reaches every node;
  - a snapshot of the cluster under writes restores into a fresh solo
    node and into a renamed index on the same cluster: every write
    acknowledged before the snapshot started is there, nothing that was
    not attempted before it ended; a later snapshot holds every write;
  - incremental: a second snapshot after 1% new documents writes < 10% of
    the first's bytes (both printed); deleting snapshots removes exactly
    the blobs no other snapshot needs;
  - integrity: a corrupt byte, a truncated or a deleted blob makes restore
    fail naming the file, with no index left behind; other snapshots of
    the repository still restore;
  - compress: true: blobs, catalogue and manifests are zstd frames, a
    node without compress restores them, a repository holding both kinds
    restores and deletes cleanly;
  - max_snapshot_bytes_per_sec: a lower bound on the time taken and the
    _nodes/stats throttle counter;
  - _status and GET of a running snapshot from nodes not taking it;
  - include_global_state: persistent settings, the three kinds of
    templates and the aliases' view kept; restored onto a solo node and
    onto the cluster; aliases restored with their indices unless
    include_aliases: false;
  - kill -9 of a node holding a primary mid-snapshot (throttled with
    max_snapshot_bytes_per_sec) ends PARTIAL or FAILED, never SUCCESS;
    a new snapshot then succeeds.

    SHOAL_BIN=build/bin python3 tests/api/test_snapshot.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, error_is, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-snapshot-test-")
REPO = os.path.join(TMP, "repo")  # path.repo of every node
os.makedirs(REPO)
CFILE = os.path.join(TMP, "cluster.json")
NAMES = ["node-1", "node-2", "node-3"]  # node-1 is the metadata master
PORTS = cluster_file(CFILE, [(n, None) for n in NAMES])
NODES = {}
SOLOS = []


def log(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def start(n):
    d = os.path.join(TMP, n)
    os.makedirs(d, exist_ok=True)
    NODES[n] = ClusterNode(CFILE, n, PORTS[n][0], data=d, args=["-E", "path.repo=" + REPO])


def solo(args=None):
    s = Node(args=["-E", "path.repo=" + REPO] if args is None else args)
    SOLOS.append(s)
    return s


def ok(resp, what):
    st, b = resp
    if st != 200:
        raise AssertionError("%s: %s %s" % (what, st, b))
    return b


def wait_until(fn, what, timeout=60, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("timed out waiting for " + what)


def green(node="node-1", nodes=3):
    st, b = NODES[node].req("GET", "/_cluster/health?wait_for_status=green&wait_for_nodes=%d"
                            "&timeout=60s" % nodes, timeout=80)
    eq((st, b.get("status")), (200, "green"), "green via %s: %s" % (node, b))


def put_repo(node, name, location, **settings):
    settings["location"] = location
    return node.req("PUT", "/_snapshot/" + name, {"type": "fs", "settings": settings})


def ids_of(node, index):
    b = ok(node.req("POST", "/%s/_search" % index,
                    {"size": 10000, "_source": False, "query": {"match_all": {}}}),
           "search " + index)
    eq(b["_shards"]["failed"], 0, "shard failures searching %s" % index)
    return {h["_id"] for h in b["hits"]["hits"]}


def create_index(node, name, shards, replicas):
    ok(node.req("PUT", "/" + name, {"settings": {"number_of_shards": shards,
                                                 "number_of_replicas": replicas}}),
       "create " + name)


def load(node, index, start, count, text=""):
    lines = []
    for i in range(start, start + count):
        lines += [{"index": {"_index": index, "_id": str(i)}},
                  {"n": i, "t": "doc %d %s" % (i, text)}]
    b = ok(node.bulk(lines, params="?refresh=true"), "bulk")
    eq(b["errors"], False, "bulk errors")


def manifest(repo_dir, snap):
    """The manifest file of a snapshot, read from the repository."""
    with open(os.path.join(repo_dir, "index.latest")) as f:
        gen = f.read().strip()
    with open(os.path.join(repo_dir, "index-" + gen)) as f:
        cat = json.load(f)
    uuid = [s["uuid"] for s in cat["snapshots"] if s["snapshot"] == snap][0]
    with open(os.path.join(repo_dir, "snap-%s.json" % uuid)) as f:
        return json.load(f)


def blob_path(repo_dir, key):
    return os.path.join(repo_dir, "blobs", key[:2], key)


def snapshot(node, repo, snap, body, what=None):
    b = ok(node.req("PUT", "/_snapshot/%s/%s?wait_for_completion=true" % (repo, snap), body,
                    timeout=300), what or "snapshot " + snap)
    return b["snapshot"]


def status(node, repo, snap):
    b = ok(node.req("GET", "/_snapshot/%s/%s/_status" % (repo, snap)), "status " + snap)
    return b["snapshots"][0]


# ---------------------------------------------------------------- tests


@test
def cluster_starts_and_repositories_register():
    for n in NAMES:
        start(n)
    for n in NAMES:
        green(n)
    n1 = NODES["node-1"]
    # before: _snapshot is an API, not an index
    eq(ok(n1.req("GET", "/_snapshot"), "GET /_snapshot"), {}, "no repositories yet")
    error_is(n1.req("GET", "/_snapshot/nope"), 404, "repository_missing_exception")
    ok(put_repo(NODES["node-2"], "main", os.path.join(REPO, "main")), "PUT repo via node-2")
    for n in NAMES:
        b = ok(NODES[n].req("GET", "/_snapshot/main"), "GET repo via " + n)
        eq(b["main"]["type"], "fs", "type via " + n)
        eq(b["main"]["settings"]["location"], os.path.join(REPO, "main"), "location via " + n)
    v = ok(n1.req("POST", "/_snapshot/main/_verify"), "verify")
    eq(sorted(v["nodes"]), NAMES, "every node verified the repository")
    # a relative location lies under path.repo too
    ok(put_repo(n1, "rel", "relative/dir"), "relative location")
    eq(os.path.isdir(os.path.join(REPO, "relative", "dir")), True, "relative dir made")
    ok(n1.req("DELETE", "/_snapshot/rel"), "delete repo")
    for n in NAMES:
        error_is(NODES[n].req("GET", "/_snapshot/rel"), 404, "repository_missing_exception")


@test
def bad_locations_are_refused():
    n1 = NODES["node-1"]
    outside = os.path.join(TMP, "outside")
    os.makedirs(outside, exist_ok=True)
    os.symlink(outside, os.path.join(REPO, "escape"))
    for loc in [os.path.join(REPO, "..", "outside"), os.path.join(REPO, "a", "..", "..", "x"),
                "../outside", "/etc", outside, os.path.join(REPO, "escape"),
                os.path.join(REPO, "escape", "deeper"), ""]:
        error_is(put_repo(n1, "bad", loc), 400, "repository_exception")
        error_is(n1.req("GET", "/_snapshot/bad"), 404, "repository_missing_exception")
    eq(os.listdir(outside), [], "nothing written outside path.repo")
    error_is(n1.req("PUT", "/_snapshot/bad", {"type": "s3", "settings": {"location": "x"}}),
             400, "repository_exception")
    error_is(n1.req("PUT", "/_snapshot/bad", {"type": "fs", "settings": {"location": "x",
                                                                        "compress": "maybe"}}),
             400, "repository_exception")
    error_is(n1.req("PUT", "/_snapshot/bad", {"type": "fs", "settings": {
        "location": "x", "max_snapshot_bytes_per_sec": "fast"}}), 400, "repository_exception")
    st, _, _ = n1.raw("PUT", "/_snapshot/bad", "{not json")
    eq(st, 400, "malformed body")
    # a node without path.repo refuses every location
    s = solo(args=[])
    error_is(put_repo(s, "r", os.path.join(REPO, "x")), 400, "repository_exception",
             "path.repo")
    # bad snapshot names
    error_is(n1.req("PUT", "/_snapshot/main/Upper?wait_for_completion=true", {}), 400,
             "invalid_snapshot_name_exception")
    error_is(n1.req("PUT", "/_snapshot/main/_x?wait_for_completion=true", {}), 400,
             "invalid_snapshot_name_exception")
    error_is(n1.req("GET", "/_snapshot/main/nosuch"), 404, "snapshot_missing_exception")


ACKED = []  # (time acknowledged, ids)
ATTEMPTED = []  # (time sent, ids)


def writer(stop, port_node, counter):
    """Writes batches of new documents until stopped; records what was
    sent and what was acknowledged, with times."""
    node = Node.__new__(Node)  # a second connection to the same process
    node.port, node.conn = port_node.port, None
    while not stop.is_set():
        base = counter[0]
        counter[0] += 20
        ids = [str(i) for i in range(base, base + 20)]
        lines = []
        for i in ids:
            lines += [{"index": {"_index": "w", "_id": i}}, {"n": int(i), "t": "w %s" % i}]
        ATTEMPTED.append((time.time(), ids))
        try:
            st, b = node.bulk(lines)
        except OSError:
            continue
        if st == 200 and not b["errors"]:
            ACKED.append((time.time(), ids))
        time.sleep(0.01)


def acked_before(t):
    return {i for ts, ids in ACKED if ts < t for i in ids}


def attempted_before(t):
    return {i for ts, ids in ATTEMPTED if ts < t for i in ids}


@test
def snapshot_under_writes_restores_on_solo_and_renamed():
    n1, n2, n3 = NODES["node-1"], NODES["node-2"], NODES["node-3"]
    create_index(n1, "w", 3, 1)
    green()
    # the same location under a second, throttled name: s1 takes a few
    # seconds while writes go on and a force merge replaces the segments
    ok(put_repo(n1, "thr", os.path.join(REPO, "main"), max_snapshot_bytes_per_sec="100kb"),
       "throttled name for the main repository")
    load(n1, "w", 1000000, 2000, "preloaded " * 20)
    pre = [str(i) for i in range(1000000, 1002000)]
    ATTEMPTED.append((time.time(), pre))
    ACKED.append((time.time(), pre))
    stop, counter = threading.Event(), [0]
    th = threading.Thread(target=writer, args=(stop, n2, counter), daemon=True)
    th.start()
    wait_until(lambda: len(ACKED) >= 10, "first writes")
    t0 = time.time()
    ok(n3.req("PUT", "/_snapshot/thr/s1", {"indices": "w"}), "start s1")
    wait_until(lambda: any(sh["stage"] == "STARTED" for sh in
                           status(n3, "thr", "s1")["indices"]["w"]["shards"].values()),
               "s1 copying")
    ok(n1.req("POST", "/w/_forcemerge?max_num_segments=1", timeout=120), "merge during s1")

    def s1_done():
        b = ok(n3.req("GET", "/_snapshot/thr/s1"), "GET s1")["snapshots"][0]
        return b if b["state"] != "IN_PROGRESS" else None

    info = wait_until(s1_done, "s1 to finish", timeout=120)
    t1 = time.time()
    during = [ts for ts, _ in ACKED if t0 < ts < t1]
    log("     s1 took %.1f s; %d write batches acknowledged meanwhile" % (t1 - t0, len(during)))
    if not during:
        raise AssertionError("no write went through during the snapshot")
    wait_until(lambda: len(ACKED) >= len([a for a in ACKED if a[0] < t1]) + 5,
               "writes after the snapshot")
    stop.set()
    th.join(30)
    eq(info["state"], "SUCCESS", "s1 state: %s" % info)
    eq(info["shards"], {"total": 3, "failed": 0, "successful": 3}, "s1 shards")
    before, upto = acked_before(t0), attempted_before(t1)
    log("     s1: %d writes acknowledged before it started, %d attempted before it ended"
        % (len(before), len(upto)))
    # the same snapshot seen from every node
    for n in NAMES:
        b = ok(NODES[n].req("GET", "/_snapshot/main/s1"), "GET s1 via " + n)
        eq(b["snapshots"][0]["state"], "SUCCESS", "s1 via " + n)
    rows = ok(n1.req("GET", "/_cat/snapshots/main?format=json"), "_cat/snapshots")
    eq([(r["id"], r["status"], r["total_shards"]) for r in rows], [("s1", "SUCCESS", "3")],
       "_cat/snapshots")
    eq(ok(n1.req("GET", "/_snapshot/thr/_all"), "s1 via the other name")["snapshots"][0]["snapshot"],
       "s1", "both names see one repository")

    # restore into a fresh solo node (another cluster)
    s = solo()
    ok(put_repo(s, "main", os.path.join(REPO, "main")), "repo on solo")
    r = ok(s.req("POST", "/_snapshot/main/s1/_restore?wait_for_completion=true",
                 {"indices": "w"}, timeout=300), "restore on solo")
    eq(r["snapshot"]["shards"]["failed"], 0, "solo restore failures")
    s.refresh("w")
    got = ids_of(s, "w")
    missing = before - got
    extra = got - upto
    eq((len(missing), len(extra)), (0, 0), "solo restore: missing %s extra %s"
       % (sorted(missing)[:5], sorted(extra)[:5]))
    st, b = s.req("GET", "/w/_doc/%s" % sorted(before)[0])
    eq((st, b["_source"]["t"]), (200, "w %s" % sorted(before)[0]), "a restored source")
    rec = ok(s.req("GET", "/_cat/recovery?format=json"), "_cat/recovery on solo")
    eq(sorted((x["index"], x["shard"], x["type"], x["stage"], x["source_node"]) for x in rec),
       [("w", str(k), "snapshot", "done", "main/s1") for k in range(3)], "solo _cat/recovery")
    m = ok(s.req("GET", "/w/_mapping"), "restored mapping")
    eq(m["w"]["mappings"]["properties"]["n"]["type"], "long", "mapping came along")

    # restore into a renamed index on the same cluster, with a replica
    r = ok(n1.req("POST", "/_snapshot/main/s1/_restore?wait_for_completion=true",
                  {"indices": "w", "rename_pattern": "(.+)", "rename_replacement": "r-$1",
                   "index_settings": {"index.number_of_replicas": 1}}, timeout=300),
           "restore renamed")
    eq(r["snapshot"]["indices"], ["r-w"], "renamed")
    green()
    rec = ok(n2.req("GET", "/_cat/recovery?format=json"), "_cat/recovery")
    eq(sorted((x["shard"], x["stage"], x["source_node"]) for x in rec
              if x["index"] == "r-w" and x["type"] == "snapshot"),
       [(str(k), "done", "main/s1") for k in range(3)], "restores in _cat/recovery")
    n1.refresh("r-w")
    got2 = ids_of(n2, "r-w")
    eq(got2, got, "cluster restore holds the same documents as the solo restore")
    sh = ok(n1.req("GET", "/_cat/shards/r-w?format=json"), "_cat/shards")
    eq(sorted((x["prirep"], x["state"]) for x in sh),
       [("p", "STARTED")] * 3 + [("r", "STARTED")] * 3, "restored copies")
    # the replicas hold the same: search each copy
    for name in NAMES:
        b = ok(n1.req("POST", "/r-w/_search?preference=_only_nodes:%s" % name,
                      {"size": 0, "track_total_hits": True}), "count on " + name)
    # restoring over an existing index is refused, nothing changes
    error_is(n1.req("POST", "/_snapshot/main/s1/_restore?wait_for_completion=true",
                    {"indices": "w"}), 400, "snapshot_restore_exception", "already exists")

    # a later snapshot holds every write
    n1.refresh("w")
    allw = {i for _, ids in ACKED for i in ids}
    snapshot(n1, "main", "s2", {"indices": "w"})
    ok(n1.req("POST", "/_snapshot/main/s2/_restore?wait_for_completion=true",
              {"indices": "w", "rename_pattern": "w", "rename_replacement": "later"},
              timeout=300), "restore s2")
    green()
    n1.refresh("later")
    got3 = ids_of(n1, "later")
    eq(allw - got3, set(), "acknowledged writes missing from the later snapshot")


@test
def second_snapshot_is_incremental_and_delete_collects():
    n1 = NODES["node-1"]
    loc = os.path.join(REPO, "inc")
    ok(put_repo(n1, "inc", loc), "repo inc")
    create_index(n1, "inc", 3, 1)
    green()
    text = " ".join("word%d" % (k % 97) for k in range(150))  # ~1 KB per document
    for part in range(4):
        load(n1, "inc", part * 1000, 1000, text)
    a = snapshot(n1, "inc", "first", {"indices": "inc"})
    eq(a["state"], "SUCCESS", "first")
    first = status(n1, "inc", "first")["stats"]
    load(n1, "inc", 4000, 40, text)  # 1% new documents
    b = snapshot(n1, "inc", "second", {"indices": "inc"})
    eq(b["state"], "SUCCESS", "second")
    second = status(n1, "inc", "second")["stats"]
    f_bytes, s_bytes = first["incremental"]["size_in_bytes"], second["incremental"]["size_in_bytes"]
    log("     first snapshot wrote %d bytes (%d files); second, after 1%% new docs, wrote %d "
        "bytes (%d files) of %d = %.1f%%"
        % (f_bytes, first["incremental"]["file_count"], s_bytes,
           second["incremental"]["file_count"], second["total"]["size_in_bytes"],
           100.0 * s_bytes / f_bytes))
    eq(f_bytes, first["total"]["size_in_bytes"], "first writes everything")
    if not s_bytes < 0.10 * f_bytes:
        raise AssertionError("second snapshot wrote %d bytes, first %d" % (s_bytes, f_bytes))
    blobs_before = {f for _, _, fs in os.walk(os.path.join(loc, "blobs")) for f in fs}
    # deleting the first keeps everything the second needs
    ok(n1.req("DELETE", "/_snapshot/inc/first"), "delete first")
    error_is(n1.req("GET", "/_snapshot/inc/first"), 404, "snapshot_missing_exception")
    need = {f["blob"] for ix in manifest(loc, "second")["indices"].values()
            for sh in ix["shards"] for f in sh["files"]}
    blobs_after = {f for _, _, fs in os.walk(os.path.join(loc, "blobs")) for f in fs}
    eq(need - blobs_after, set(), "blobs of the second snapshot kept")
    eq(blobs_after, need, "only blobs of the second snapshot left")
    if not len(blobs_after) < len(blobs_before):
        raise AssertionError("deleting the first removed nothing")
    ok(n1.req("POST", "/_snapshot/inc/second/_restore?wait_for_completion=true",
              {"rename_pattern": "inc", "rename_replacement": "inc2"}, timeout=300),
       "restore second")
    n1.refresh("inc2")
    eq(len(ids_of(n1, "inc2")), 4040, "second restores whole")
    ok(n1.req("DELETE", "/_snapshot/inc/second"), "delete second")
    eq([f for _, _, fs in os.walk(os.path.join(loc, "blobs")) for f in fs], [], "no blobs left")
    ok(n1.req("DELETE", "/inc2"), "drop inc2")


def zstd_json(path):
    """A compressed metadata file of the repository: a zstd frame of JSON."""
    with open(path, "rb") as f:
        raw = f.read()
    eq(raw[:4], b"\x28\xb5\x2f\xfd", "%s is a zstd frame" % os.path.basename(path))
    out = subprocess.run(["zstd", "-dc"], input=raw, capture_output=True, timeout=30)
    eq(out.returncode, 0, "zstd -dc %s: %s" % (path, out.stderr))
    return json.loads(out.stdout)


@test
def compressed_repository_round_trip_and_mixed_reads():
    n1 = NODES["node-1"]
    loc = os.path.join(REPO, "zip")
    ok(put_repo(n1, "zip", loc, compress=True), "repo zip")
    b = ok(NODES["node-3"].req("GET", "/_snapshot/zip"), "GET zip via node-3")
    eq(b["zip"]["settings"]["compress"], "true", "compress shown everywhere")
    create_index(n1, "zc", 2, 1)
    green()
    text = " ".join("common words repeat" for _ in range(40))
    load(n1, "zc", 0, 1500, text)
    eq(snapshot(n1, "zip", "z1", {"indices": "zc"})["state"], "SUCCESS", "z1")
    # every blob is a zstd frame, smaller than the file it holds; the
    # catalogue and the manifest are compressed too
    with open(os.path.join(loc, "index.latest")) as f:
        gen = f.read().strip()
    cat = zstd_json(os.path.join(loc, "index-" + gen))
    uuid = [x["uuid"] for x in cat["snapshots"] if x["snapshot"] == "z1"][0]
    man = zstd_json(os.path.join(loc, "snap-%s.json" % uuid))
    files = [f for sh in man["indices"]["zc"]["shards"] for f in sh["files"]]
    stored = 0
    for f in files:
        p = blob_path(loc, f["blob"]) + ".zst"
        eq((os.path.exists(p), os.path.exists(blob_path(loc, f["blob"]))), (True, False),
           "blob of %s stored compressed" % f["name"])
        with open(p, "rb") as fh:
            eq(fh.read(4), b"\x28\xb5\x2f\xfd", "zstd blob")
        stored += os.path.getsize(p)
    total = sum(f["size"] for f in files)
    if not stored < total:
        raise AssertionError("compressed blobs %d bytes, files %d" % (stored, total))
    # a solo node registering the location without compress restores it
    s = solo()
    ok(put_repo(s, "zip", loc), "zip on solo, compress false")
    ok(s.req("POST", "/_snapshot/zip/z1/_restore?wait_for_completion=true", {"indices": "zc"},
             timeout=300), "restore z1 on solo")
    s.refresh("zc")
    eq(ids_of(s, "zc"), {str(i) for i in range(1500)}, "compressed snapshot restored")
    # the same repository, compress off: new blobs raw, old ones shared;
    # a restore reads both kinds
    ok(put_repo(n1, "zip", loc, compress=False), "compress off")
    load(n1, "zc", 1500, 300, text)
    eq(snapshot(n1, "zip", "z2", {"indices": "zc"})["state"], "SUCCESS", "z2")
    names = [f for _, _, fs in os.walk(os.path.join(loc, "blobs")) for f in fs]
    zs = [f for f in names if f.endswith(".zst")]
    eq((len(zs) > 0, len(zs) < len(names)), (True, True), "both kinds of blob: %s" % names)
    ok(n1.req("POST", "/_snapshot/zip/z2/_restore?wait_for_completion=true",
              {"indices": "zc", "rename_pattern": "zc", "rename_replacement": "zc2"},
              timeout=300), "restore z2 (mixed)")
    green()
    n1.refresh("zc2")
    eq(len(ids_of(n1, "zc2")), 1800, "mixed restore whole")
    # delete collects compressed blobs like raw ones
    ok(n1.req("DELETE", "/_snapshot/zip/z1"), "delete z1")
    ok(n1.req("DELETE", "/_snapshot/zip/z2"), "delete z2")
    eq([f for _, _, fs in os.walk(os.path.join(loc, "blobs")) for f in fs], [], "no blobs left")
    ok(n1.req("DELETE", "/zc2"), "drop zc2")


def throttle_ms():
    total = 0
    for n in NAMES:
        b = ok(NODES[n].req("GET", "/_nodes/stats"), "_nodes/stats")
        total += sum(e["snapshots"]["throttle_time_in_millis"] for e in b["nodes"].values()
                     if e["name"] == n)
    return total


@test
def max_snapshot_bytes_per_sec_throttles():
    n1 = NODES["node-1"]
    create_index(n1, "tz", 3, 0)
    text = " ".join("word%d" % (k % 89) for k in range(120))
    load(n1, "tz", 0, 1200, text)
    rate = 128 << 10
    ok(put_repo(n1, "thz", os.path.join(REPO, "thz"), max_snapshot_bytes_per_sec="128kb"),
       "throttled repo")
    before = throttle_ms()
    t0 = time.time()
    eq(snapshot(n1, "thz", "t1", {"indices": "tz"})["state"], "SUCCESS", "t1")
    took = time.time() - t0
    size = status(n1, "thz", "t1")["stats"]["total"]["size_in_bytes"]
    waited = throttle_ms() - before
    # a lower bound only (a busy machine makes it slower, never faster):
    # three nodes copy at once, each held to the rate
    if not took >= 0.8 * size / (3 * rate):
        raise AssertionError("%d bytes in %.2f s at 128kb/s per node" % (size, took))
    if not waited > 0:
        raise AssertionError("throttle_time_in_millis did not grow: %d" % waited)
    ok(n1.req("DELETE", "/tz"), "drop tz")


@test
def status_of_a_running_snapshot_from_any_node():
    n1, n2, n3 = (NODES[x] for x in NAMES)
    create_index(n1, "lv", 3, 0)
    text = " ".join("word%d" % (k % 89) for k in range(120))
    load(n1, "lv", 0, 1200, text)
    ok(put_repo(n1, "live", os.path.join(REPO, "live"), max_snapshot_bytes_per_sec="48kb"),
       "throttled repo")
    ok(n2.req("PUT", "/_snapshot/live/l1", {"indices": "lv"}), "start l1 on node-2")
    # node-2 takes it; node-3 and node-1 answer with node-2's progress
    seen = []
    for n in (n3, n1):
        b = ok(n.req("GET", "/_snapshot/live/l1/_status"), "status via " + n.name)
        seen.append(b["snapshots"][0]["state"])
        eq(b["snapshots"][0]["snapshot"], "l1", "the snapshot")
    g = ok(n3.req("GET", "/_snapshot/live/l1"), "GET l1 via node-3")
    eq(g["snapshots"][0]["snapshot"], "l1", "GET running l1 elsewhere")
    # the snapshot takes seconds at 48kb/s per node, so the first answers
    # come while it runs (a slower machine only makes it longer)
    eq(seen[0], "IN_PROGRESS", "status of the running snapshot via node-3")
    done = wait_until(lambda: (lambda x: x if x["state"] == "SUCCESS" else None)(
        status(n3, "live", "l1")), "l1 to finish", timeout=120)
    eq(done["shards_stats"]["failed"], 0, "no failed shard: %s" % done)
    error_is(n3.req("GET", "/_snapshot/live/nope/_status"), 404, "snapshot_missing_exception")
    ok(n1.req("DELETE", "/lv"), "drop lv")


@test
def global_state_and_aliases_round_trip():
    n1, n2, n3 = (NODES[x] for x in NAMES)
    loc = os.path.join(REPO, "glob")
    ok(put_repo(n1, "glob", loc), "repo glob")
    key = "cluster.routing.allocation.node_concurrent_recoveries"
    ok(n1.req("PUT", "/_cluster/settings", {"persistent": {key: "3"}}), "a persistent setting")
    ok(n2.req("PUT", "/_component_template/gc1",
              {"template": {"mappings": {"properties": {"g": {"type": "keyword"}}}}}), "component")
    ok(n2.req("PUT", "/_index_template/gt1", {"index_patterns": ["g-*"], "composed_of": ["gc1"],
                                              "priority": 7}), "composable")
    ok(n2.req("PUT", "/_template/gl1", {"index_patterns": ["gl-*"], "order": 2,
                                        "settings": {"number_of_shards": 2}}), "legacy")
    ok(n1.req("PUT", "/ga", {"settings": {"number_of_shards": 2, "number_of_replicas": 0},
                             "aliases": {"ga-alias": {}, "ga-f": {"filter": {"term": {"n": 1}}}}}),
       "index with aliases")
    load(n1, "ga", 0, 50)
    ok(n1.req("PUT", "/gb", {"settings": {"number_of_shards": 1, "number_of_replicas": 0},
                             "aliases": {"gb-alias": {"index_routing": "r1"}}}),
       "an index outside the snapshot, with an alias")
    eq(snapshot(n1, "glob", "g1", {"indices": "ga"})["state"], "SUCCESS", "g1")
    eq(snapshot(n1, "glob", "g0", {"indices": "ga", "include_global_state": False})["state"],
       "SUCCESS", "g0")
    gs = manifest(loc, "g1")["global_state"]
    eq(gs["persistent_settings"].get(key), "3", "settings kept: %s" % gs["persistent_settings"])
    eq((sorted(gs["templates"]["index"]), sorted(gs["templates"]["component"]),
        sorted(gs["templates"]["legacy"])), (["gt1"], ["gc1"], ["gl1"]), "templates kept")
    eq({a: sorted(v) for a, v in gs["aliases"].items()},
       {"ga-alias": ["ga"], "ga-f": ["ga"], "gb-alias": ["gb"]}, "the aliases' view")
    eq(gs["aliases"]["ga-f"]["ga"]["filter"], {"term": {"n": 1}}, "with their options")
    eq("global_state" in manifest(loc, "g0"), False, "no global state when not asked")

    # a solo node: templates and aliases come back (it has no cluster settings)
    s = solo()
    ok(put_repo(s, "glob", loc), "glob on solo")
    ok(s.req("POST", "/_snapshot/glob/g1/_restore?wait_for_completion=true",
             {"include_global_state": True}, timeout=300), "restore g1 with global state")
    eq(ok(s.req("GET", "/_index_template/gt1"), "gt1 on solo")["index_templates"][0]["name"],
       "gt1", "composable template back")
    ok(s.req("GET", "/_component_template/gc1"), "component back")
    ok(s.req("GET", "/_template/gl1"), "legacy back")
    s.refresh("ga")
    eq(ok(s.req("POST", "/ga-alias/_count"), "count via alias")["count"], 50, "alias back")
    eq(ok(s.req("POST", "/ga-f/_count"), "count via filtered alias")["count"], 1,
       "filtered alias back with its filter")
    ok(s.req("PUT", "/g-new"), "index matching the restored template")
    m = ok(s.req("GET", "/g-new/_mapping"), "mapping")
    eq(m["g-new"]["mappings"]["properties"]["g"]["type"], "keyword", "template applies")

    # the cluster: drop it all, restore, everything back, on every node
    ok(n1.req("PUT", "/_cluster/settings", {"persistent": {key: None}}), "reset setting")
    for path in ("/_index_template/gt1", "/_component_template/gc1", "/_template/gl1", "/ga",
                 "/gb/_alias/gb-alias"):
        ok(n1.req("DELETE", path), "delete " + path)
    ok(n2.req("POST", "/_snapshot/glob/g1/_restore?wait_for_completion=true",
              {"include_global_state": True}, timeout=300), "restore g1 on the cluster")
    al = ok(n3.req("GET", "/gb/_alias/gb-alias"), "the view's alias of an index kept")
    eq(al["gb"]["aliases"]["gb-alias"].get("index_routing"), "r1", "with its routing: %s" % al)
    b = ok(n3.req("GET", "/_cluster/settings?flat_settings=true"), "settings via node-3")
    eq(b["persistent"].get(key), "3", "setting back: %s" % b)
    for n in (n1, n3):
        ok(n.req("GET", "/_index_template/gt1"), "gt1 via " + n.name)
        ok(n.req("GET", "/_template/gl1"), "gl1 via " + n.name)
    n1.refresh("ga")
    eq(ok(n3.req("POST", "/ga-alias/_count"), "alias on the cluster")["count"], 50, "alias back")
    # include_aliases: false; a snapshot without global state cannot give one
    ok(n1.req("POST", "/_snapshot/glob/g1/_restore?wait_for_completion=true",
              {"include_aliases": False, "rename_pattern": "ga", "rename_replacement": "ga-na"},
              timeout=300), "restore without aliases")
    eq(ok(n1.req("GET", "/ga-na"), "ga-na")["ga-na"]["aliases"], {}, "no aliases")
    error_is(n1.req("POST", "/_snapshot/glob/g0/_restore?wait_for_completion=true",
                    {"include_global_state": True, "rename_pattern": "ga",
                     "rename_replacement": "ga-0"}), 400, "snapshot_restore_exception",
             "no global state")
    error_is(n1.req("GET", "/ga-0"), 404, "index_not_found_exception")
    ok(n1.req("PUT", "/_cluster/settings", {"persistent": {key: None}}), "reset setting")
    for path in ("/_index_template/gt1", "/_component_template/gc1", "/_template/gl1", "/ga",
                 "/ga-na", "/gb"):
        ok(n1.req("DELETE", path), "delete " + path)


@test
def corrupt_truncated_missing_blobs_refuse_restore():
    n1 = NODES["node-1"]
    loc = os.path.join(REPO, "integrity")
    ok(put_repo(n1, "integ", loc), "repo integ")
    create_index(n1, "ca", 2, 0)
    create_index(n1, "cb", 2, 0)
    green()
    load(n1, "ca", 0, 300, "alpha")
    load(n1, "cb", 0, 500, "bravo")
    snapshot(n1, "integ", "sa", {"indices": "ca"})
    snapshot(n1, "integ", "sb", {"indices": "cb"})
    ma, mb = manifest(loc, "sa"), manifest(loc, "sb")
    used_a = {f["blob"] for sh in ma["indices"]["ca"]["shards"] for f in sh["files"]}
    victim = max((f for sh in mb["indices"]["cb"]["shards"] for f in sh["files"]
                  if f["blob"] not in used_a and f["name"].startswith("seg-")),
                 key=lambda f: f["size"])
    path = blob_path(loc, victim["blob"])
    with open(path, "rb") as f:
        good = f.read()

    def restore_b():
        return n1.req("POST", "/_snapshot/integ/sb/_restore?wait_for_completion=true",
                      {"rename_pattern": "cb", "rename_replacement": "cb-restored"},
                      timeout=300)

    cases = [("corrupt", lambda: good[:len(good) // 2] + bytes([good[len(good) // 2] ^ 0x40])
              + good[len(good) // 2 + 1:]),
             ("truncated", lambda: good[:len(good) - 100]),
             ("missing", None)]
    for word, content in cases:
        os.chmod(path, 0o644)
        if content is None:
            os.unlink(path)
        else:
            with open(path, "wb") as f:
                f.write(content())
        st, b = restore_b()
        if st < 400 or "error" not in b:
            raise AssertionError("%s blob: restore answered %s %s" % (word, st, b))
        reason = b["error"]["reason"]
        eq(b["error"]["type"], "snapshot_restore_exception", "%s: type" % word)
        if victim["name"] not in reason or word not in reason:
            raise AssertionError("%s blob: reason %r does not name %s"
                                 % (word, reason, victim["name"]))
        error_is(n1.req("GET", "/cb-restored"), 404, "index_not_found_exception")
        # the other snapshot of the repository still restores
        ok(n1.req("POST", "/_snapshot/integ/sa/_restore?wait_for_completion=true",
                  {"rename_pattern": "ca", "rename_replacement": "ca-" + word}, timeout=300),
           "restore sa with sb's blob %s" % word)
        n1.refresh("ca-" + word)
        eq(len(ids_of(n1, "ca-" + word)), 300, "sa restored whole")
        ok(n1.req("DELETE", "/ca-" + word), "drop")
    with open(path, "wb") as f:
        f.write(good)
    # a manifest that lost a shard's entry is refused too
    mfile = os.path.join(loc, "snap-%s.json" % mb["uuid"])
    with open(mfile) as f:
        mtext = f.read()
    short = json.loads(mtext)
    short["indices"]["cb"]["shards"].pop()
    with open(mfile, "w") as f:
        json.dump(short, f)
    error_is(restore_b(), 500, "snapshot_restore_exception", "each of its shards")
    error_is(n1.req("GET", "/cb-restored"), 404, "index_not_found_exception")
    with open(mfile, "w") as f:
        f.write(mtext)
    ok(restore_b(), "restore sb once its blob is back")
    n1.refresh("cb-restored")
    eq(len(ids_of(n1, "cb-restored")), 500, "sb restored whole")


@test
def bad_requests_get_errors_and_change_nothing():
    n1 = NODES["node-1"]
    error_is(n1.req("PUT", "/_snapshot/nope/s?wait_for_completion=true", {}), 404,
             "repository_missing_exception")
    error_is(n1.req("PUT", "/_snapshot/main/s1?wait_for_completion=true", {}), 400,
             "invalid_snapshot_name_exception", "already exists")
    error_is(n1.req("PUT", "/_snapshot/main/x?wait_for_completion=true", {"indices": 5}), 400,
             "parsing_exception")
    error_is(n1.req("PUT", "/_snapshot/main/x?wait_for_completion=true", {"bogus": 1}), 400,
             "parsing_exception")
    error_is(n1.req("PUT", "/_snapshot/main/x?wait_for_completion=true",
                    {"indices": "no-such-index"}), 404, "index_not_found_exception")
    error_is(n1.req("GET", "/_snapshot/main/x"), 404, "snapshot_missing_exception")
    error_is(n1.req("DELETE", "/_snapshot/main/x"), 404, "snapshot_missing_exception")
    error_is(n1.req("POST", "/_snapshot/main/x/_restore", {}), 404, "snapshot_missing_exception")
    error_is(n1.req("POST", "/_snapshot/main/s1/_restore",
                    {"rename_pattern": "(", "rename_replacement": "y"}), 400,
             "illegal_argument_exception")
    error_is(n1.req("POST", "/_snapshot/main/s1/_restore",
                    {"rename_pattern": "w", "rename_replacement": "y",
                     "index_settings": {"index.number_of_shards": 5}}), 400,
             "snapshot_restore_exception")
    error_is(n1.req("POST", "/_snapshot/main/s1/_restore",
                    {"rename_pattern": "w", "rename_replacement": "Bad*Name"}), 400,
             "invalid_index_name_exception")
    error_is(n1.req("POST", "/_snapshot/main/s1/_restore", {"indices": "absent"}), 404,
             "snapshot_restore_exception")
    st, _, _ = n1.raw("POST", "/_snapshot/main/s1/_restore", "[1,")
    eq(st, 400, "malformed restore body")
    st, _ = n1.req("GET", "/y")
    eq(st, 404, "nothing restored as y")
    all_snaps = ok(n1.req("GET", "/_snapshot/main/_all"), "GET _all")["snapshots"]
    eq(sorted(s["snapshot"] for s in all_snaps), ["s1", "s2"], "snapshots of main")
    eq(ok(n1.req("GET", "/_snapshot/main/s*"), "GET s*")["snapshots"][0]["snapshot"], "s1",
       "pattern")


@test
def kill_primary_mid_snapshot_is_partial_then_new_snapshot_succeeds():
    n1 = NODES["node-1"]
    loc = os.path.join(REPO, "slow")
    ok(put_repo(n1, "slow", loc, max_snapshot_bytes_per_sec="100kb"), "throttled repo")
    create_index(n1, "k", 3, 0)
    green()
    text = " ".join("k%d" % (k * 7919 % 10007) for k in range(200))
    for part in range(3):
        load(n1, "k", part * 1000, 1000, text)
    shards = ok(n1.req("GET", "/_cat/shards/k?format=json"), "_cat/shards k")
    victims = [s for s in shards if s["prirep"] == "p" and s["node"] != "node-1"]
    eq(len(victims) > 0, True, "a primary off node-1")
    victim_node = victims[0]["node"]
    ok(n1.req("PUT", "/_snapshot/slow/mid", {"indices": "k"}), "start async snapshot")

    def copying_on_victim():
        st = status(n1, "slow", "mid")
        for sh_id, sh in st["indices"]["k"]["shards"].items():
            if sh["node"] == victim_node and sh["stage"] == "STARTED" and \
                    sh["stats"]["processed"]["size_in_bytes"] < sh["stats"]["total"]["size_in_bytes"]:
                return True
        if st["state"] != "IN_PROGRESS":
            raise AssertionError("snapshot finished before the kill: %s" % st["state"])
        return False

    wait_until(copying_on_victim, "the snapshot copying on " + victim_node, timeout=60)
    NODES[victim_node].kill()

    def finished():
        b = ok(n1.req("GET", "/_snapshot/slow/mid"), "GET mid")
        s = b["snapshots"][0]
        return s if s["state"] != "IN_PROGRESS" else None

    info = wait_until(finished, "the interrupted snapshot to end", timeout=120)
    log("     interrupted snapshot: %s, shards %s, failures %s"
        % (info["state"], info["shards"], [f["reason"] for f in info["failures"]]))
    if info["state"] not in ("PARTIAL", "FAILED"):
        raise AssertionError("interrupted snapshot ended %s" % info["state"])
    if not info["failures"]:
        raise AssertionError("no failure reported")
    error_is(n1.req("POST", "/_snapshot/slow/mid/_restore?wait_for_completion=true",
                    {"rename_pattern": "k", "rename_replacement": "k-mid"}), 400,
             "snapshot_restore_exception", "wasn't fully snapshotted")
    NODES[victim_node].start()
    green()
    ok(put_repo(n1, "slow", loc), "repository unthrottled")
    info = snapshot(n1, "slow", "after", {"indices": "k"})
    eq(info["state"], "SUCCESS", "new snapshot after the kill")
    ok(n1.req("POST", "/_snapshot/slow/after/_restore?wait_for_completion=true",
              {"rename_pattern": "k", "rename_replacement": "k-after"}, timeout=300),
       "restore after")
    n1.refresh("k-after")
    eq(len(ids_of(n1, "k-after")), 3000, "restored whole")
    ok(n1.req("DELETE", "/_snapshot/slow/mid"), "partial snapshot deletes")


@test
def sigterm_during_a_snapshot_stops_cleanly_and_marks_it_failed():
    s = solo()
    loc = os.path.join(REPO, "stop")
    ok(put_repo(s, "stop", loc, max_snapshot_bytes_per_sec="50kb"), "throttled repo")
    create_index(s, "t", 1, 0)
    load(s, "t", 0, 1000, "stopping " * 40)
    ok(s.req("PUT", "/_snapshot/stop/busy", {"indices": "t"}), "start async snapshot")
    wait_until(lambda: status(s, "stop", "busy")["indices"]["t"]["shards"]["0"]["stage"]
               == "STARTED", "the snapshot copying")
    t0 = time.time()
    eq(s.stop(timeout=20), 0, "exit code after SIGTERM mid-snapshot")
    log("     stopped %.1f s after SIGTERM" % (time.time() - t0))
    s.start()
    b = ok(s.req("GET", "/_snapshot/stop/busy"), "GET busy after restart")["snapshots"][0]
    if b["state"] not in ("PARTIAL", "FAILED"):
        raise AssertionError("snapshot cut by SIGTERM ended %s" % b["state"])
    ok(put_repo(s, "stop", loc), "unthrottled")
    eq(snapshot(s, "stop", "after", {"indices": "t"})["state"], "SUCCESS", "next snapshot")


def teardown():
    rc = 0
    for s in SOLOS:
        s.stop()
        s.cleanup()
    for n in NODES.values():
        r = n.stop()
        rc = rc or r
    if rc == 0:
        shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=500, teardown=teardown)
