"""The cluster page (issue #14) in a real browser: a 3-node cluster with two
indices, Debian's headless Chromium driven over the DevTools protocol by
puppeteer-core (tests/ui/, installed here from its lock file). Checks the
page's files (Content-Type, ETag, 304, weight under 300 KB), the
/_shoal/stats/* endpoints, the shard grid against _cat/shards, a kill -9
showing as unassigned copies within 5 s, a throttled file-based recovery
with its progress bars, the console's total against _count, screenshots
(non-blank), no browser console errors; and behind --users: the page needs
read, a user without roles gets 403, the signed-in user is shown.

    SHOAL_BIN=build/bin python3 tests/api/test_ui.py
    SHOAL_UI_SCREENSHOTS=DIR ...   where the screenshots go (default
                                   build/ui-screenshots/)
"""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, run_tests, shoal_bin, test  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UI = os.path.join(ROOT, "tests", "ui")
SHOTS = os.environ.get("SHOAL_UI_SCREENSHOTS") or os.path.join(ROOT, "build", "ui-screenshots")
TMP = tempfile.mkdtemp(prefix="shoal-ui-test-")
CFILE = os.path.join(TMP, "cluster.json")
NAMES = ["node-1", "node-2", "node-3"]
PORTS = cluster_file(CFILE, [(n, None) for n in NAMES], name="shoal-ui-test")
NODES = {}
BROWSER = None
DRIVERS = []
MAX_WEIGHT = 300 * 1024
# node-3 recovers file by file at this rate (about 7 s for a shard of
# ui), so that the page can see it
THROTTLE = "-E", "cluster.recovery_max_bytes_per_sec=300kb"
# a dead primary is replaced after 1 s (default 30 s), so writes go on
FAILOVER = "-E", "cluster.primary_failover_timeout=1s"


def start(name, extra=()):
    old = NODES.get(name)
    if old and old.proc and old.proc.poll() is None:
        old.kill()  # an earlier step failed before its kill: never lose a process
    data = os.path.join(TMP, name)
    os.makedirs(data, exist_ok=True)
    NODES[name] = ClusterNode(CFILE, name, PORTS[name][0], data=data,
                              args=list(FAILOVER) + list(extra))
    return NODES[name]


def n1():
    return NODES["node-1"]


def wait_until(what, fn, timeout, step=0.2):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(step)
    raise AssertionError("%s: not within %ss (last: %r)" % (what, timeout, last))


# ---- the browser ----

class Browser:
    """Debian's chromium, headless, on a DevTools port of its own."""

    def __init__(self):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if not exe:
            raise AssertionError("chromium is needed (cluster-scripts/install-deps.sh --with-tests)")
        self.profile = os.path.join(TMP, "chromium-profile")
        args = [exe, "--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                "--user-data-dir=" + self.profile, "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--metrics-recording-only", "--mute-audio", "--hide-scrollbars",
                "--force-color-profile=srgb", "--lang=en-US", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # chromium refuses to run as root with its sandbox
        self.log = open(os.path.join(TMP, "chromium.log"), "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.PIPE)
        self.ws = None
        deadline = time.time() + 60
        buf = b""
        while time.time() < deadline and self.ws is None:
            r, _, _ = select.select([self.proc.stderr], [], [], 0.5)
            if r:
                chunk = os.read(self.proc.stderr.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                m = re.search(rb"DevTools listening on (ws://\S+)", buf)
                if m:
                    self.ws = m.group(1).decode()
            if self.proc.poll() is not None:
                break
        if not self.ws:
            self.stop()
            raise AssertionError("chromium did not start: %s" % buf[-2000:].decode("utf-8", "replace"))
        # keep draining its stderr into the log so it never blocks
        self.drain = subprocess.Popen(["cat"], stdin=self.proc.stderr, stdout=self.log)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if getattr(self, "drain", None):
            self.drain.wait(10)
        self.log.close()


def npm_install():
    if os.path.isdir(os.path.join(UI, "node_modules", "puppeteer-core")):
        return
    npm = shutil.which("npm")
    if not npm or not shutil.which("node"):
        raise AssertionError("node and npm are needed for the browser test")
    p = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=UI, capture_output=True,
                       text=True, timeout=300,
                       env=dict(os.environ, PUPPETEER_SKIP_DOWNLOAD="1"))
    if p.returncode:
        raise AssertionError("npm ci in tests/ui failed:\n%s\n%s" % (p.stdout[-2000:], p.stderr[-2000:]))


class Driver:
    """tests/ui/ui_driver.js: one page, one JSON command per line."""

    def __init__(self, url, user=None, password=None):
        args = [shutil.which("node"), os.path.join(UI, "ui_driver.js"), BROWSER.ws, url]
        if user:
            args += [user, password]
        self.err = open(os.path.join(TMP, "driver-%d.log" % len(DRIVERS)), "wb")
        self.proc = subprocess.Popen(args, cwd=UI, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err)
        self.buf = b""
        DRIVERS.append(self)
        first = self.read(60)
        if not first.get("ready"):
            raise AssertionError("the page did not open: %r" % first)
        self.status = first["status"]

    def read(self, timeout):
        deadline = time.time() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError("the browser driver did not answer within %ss" % timeout)
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError("the browser driver exited (%s)" % self.proc.poll())
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def __call__(self, cmd, timeout=60, **kw):
        kw["cmd"] = cmd
        self.proc.stdin.write((json.dumps(kw) + "\n").encode())
        self.proc.stdin.flush()
        rep = self.read(timeout)
        if not rep.get("ok"):
            raise AssertionError("driver %s failed: %s" % (cmd, rep.get("error")))
        return rep

    def stop(self):
        if self.proc.poll() is None:
            try:
                self("close", timeout=10)
            except (AssertionError, OSError):
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.err.close()


PAGE = None


def page():
    global BROWSER, PAGE
    if PAGE is None:
        npm_install()
        BROWSER = BROWSER or Browser()
        PAGE = Driver("http://127.0.0.1:%d/_shoal/ui/" % PORTS["node-1"][0])
    return PAGE


# ---- the cluster's own view, to compare the page with ----

def cat_shards():
    st, rows = n1().req("GET", "/_cat/shards?format=json")
    eq(st, 200, "_cat/shards")
    return sorted((r["index"], int(r["shard"]), r["prirep"], r["state"], r.get("node"))
                  for r in rows)


def grid_copies(g):
    return sorted((t["index"], t["shard"], t["prirep"], t["state"], t["node"]) for t in g["tiles"])


def bulk_docs(index, start, count, size=100):
    """Documents with `size` random bytes each (as hex: they do not
    compress away, so a recovery has bytes to move)."""
    lines = []
    for i in range(start, start + count):
        lines.append({"index": {"_index": index, "_id": str(i)}})
        lines.append({"n": i, "tag": ["red", "green", "blue"][i % 3],
                      "body": "word%d %s" % (i % 97, os.urandom(size).hex())})
    st, b = n1().bulk(lines)
    assert st == 200 and not b["errors"], (st, str(b)[:500])


@test
def t01_cluster_and_data():
    for n in NAMES:
        start(n, THROTTLE if n == "node-3" else ())
    for n in NAMES:
        st, b = NODES[n].req("GET", "/_cluster/health?wait_for_nodes=3&timeout=30s", timeout=40)
        eq((st, b["number_of_nodes"]), (200, 3), "nodes seen by " + n)
    for name, shards in (("ui", 3), ("logs", 2)):
        st, b = n1().req("PUT", "/" + name, {"settings": {"number_of_shards": shards,
                                                          "number_of_replicas": 1}})
        eq(st, 200, "create " + name)
    for i in range(0, 6000, 1000):
        bulk_docs("ui", i, 1000)
    bulk_docs("logs", 0, 300, size=20)
    n1().refresh("ui,logs")
    st, b = n1().req("GET", "/_cluster/health?wait_for_status=green&timeout=30s", timeout=40)
    eq((st, b["status"]), (200, "green"), "health")


@test
def t02_page_files():
    base = "/_shoal/ui"
    st, h, _ = n1().raw("GET", base)
    eq((st, h.get("location")), (301, "/_shoal/ui/"), "no trailing slash redirects")
    total = 0
    for path, ctype in (("/", "text/html"), ("/app.js", "text/javascript"), ("/app.css", "text/css")):
        st, h, body = n1().raw("GET", base + path)
        eq(st, 200, path)
        assert h["content-type"].startswith(ctype), (path, h["content-type"])
        assert re.fullmatch(r'"[0-9a-f]{20}"', h.get("etag", "")), h.get("etag")
        eq(h.get("cache-control"), "no-cache", path + " cache-control")
        assert "default-src 'none'" in h.get("content-security-policy", ""), h
        total += len(body)
        st, h2, body2 = n1().raw("GET", base + path, headers={"If-None-Match": h["etag"]})
        eq((st, body2), (304, b""), path + " revalidated")
        st, _, _ = n1().raw("GET", base + path, headers={"If-None-Match": '"0000"'})
        eq(st, 200, path + " other etag")
        st, h3, _ = n1().raw("HEAD", base + path)
        eq((st, h3.get("etag")), (200, h["etag"]), path + " HEAD")
    assert total < MAX_WEIGHT, "the page weighs %d bytes" % total
    st, _, body = n1().raw("GET", base + "/index.html")
    assert st == 200 and b"<title>Shoal cluster</title>" in body
    assert b"http://" not in body and b"https://" not in body, "the page loads nothing from elsewhere"
    st, _, body = n1().raw("GET", base + "/app.js")
    assert b"http://" not in body and b"https://" not in body, "app.js loads nothing from elsewhere"
    st, b = n1().req("GET", base + "/nope.js")
    eq(st, 404, "unknown file")


@test
def t03_fanout_endpoint():
    q = {"query": {"term": {"tag": "red"}}, "size": 3}
    before = n1().req("GET", "/_shoal/stats/fanout")[1]
    for mode in ("serial", "per_shard", "per_node"):
        for _ in range(5):
            st, b = n1().req("POST", "/ui/_search?fanout=" + mode, q)
            eq((st, b["hits"]["total"]["value"]), (200, 2000), "search " + mode)
    st, f = n1().req("GET", "/_shoal/stats/fanout")
    eq(st, 200, "fanout")
    eq(f["node"], "node-1", "node")
    eq(f["window_s"], 60, "window")
    for mode in ("serial", "per_shard", "per_node"):
        got = f["fanout"]["searches"][mode] - before["fanout"]["searches"][mode]
        eq(got, 5, "searches counted for " + mode)
    ix = f["indices"]["ui"]
    c = ix["coordinator"]
    assert c["count"] >= 15, c
    assert 0 < c["p50_us"] <= c["p90_us"] <= c["p99_us"] <= c["max_us"], c
    eq(sum(b[2] for b in c["buckets"]), c["count"], "bucket counts add up")
    assert all(lo < hi for lo, hi, _ in c["buckets"]), c["buckets"]
    # per copy: node-1 ran its own shards locally, the others' came back over the wire
    assert "node-1" in ix["copies"] and ix["copies"]["node-1"]["local"], ix["copies"].keys()
    remote = [n for n, v in ix["copies"].items() if not v["local"]]
    assert remote, ix["copies"]
    assert f["fanout"]["shard_requests"]["remote"] > 0 and f["fanout"]["messages"] > 0, f["fanout"]
    # the console's per-shard timings
    st, b = n1().req("POST", "/ui/_search?timings=true", q)
    eq(st, 200, "timings")
    sh = b["_shoal"]["shards"]
    eq(sorted(s["shard"] for s in sh), [0, 1, 2], "one timing per shard")
    assert all(s["ok"] and s["took_us"] > 0 and s["node"] in NAMES for s in sh), sh
    st, b = n1().req("POST", "/ui/_search", q)
    assert "_shoal" not in b, "timings only when asked"


@test
def t04_nodes_endpoint():
    st, s = NODES["node-2"].req("GET", "/_shoal/stats/nodes")
    eq(st, 200, "stats/nodes")
    eq((s["self"], s["master"], s["cluster_name"]), ("node-2", "node-1", "shoal-ui-test"), "who")
    eq([n["name"] for n in s["nodes"]], NAMES, "every node, in order")
    cat = cat_shards()
    for n in s["nodes"]:
        assert n["alive"], n
        assert n["process"]["rss_bytes"] > 1 << 20 and n["memory"]["total"] > 0, n["process"]
        assert n["disk"]["total_bytes"] > 0, n["disk"]
        eq(sorted(p["name"] for p in n["peers"]), sorted(set(NAMES) - {n["name"]}), "peers")
        # docs of every copy the node holds agree with _cat/shards
        for index, shard, _, state, node in cat:
            if node == n["name"]:
                assert n["shards"][index][shard]["store_bytes"] > 0, (index, shard)
    rows = {(r[0], r[1], r[4]): r for r in cat}
    st, raw = n1().req("GET", "/_cat/shards?format=json")
    for r in raw:
        node = next(x for x in s["nodes"] if x["name"] == r["node"])
        eq(node["shards"][r["index"]][int(r["shard"])]["docs"], int(r["docs"]),
           "docs of %s/%s on %s" % (r["index"], r["shard"], r["node"]))
    assert rows


def grid_matches():
    g = page()("grid")
    want = cat_shards()
    return g if grid_copies(g) == want else None


@test
def t05_grid_shows_every_copy():
    p = page()
    eq(p.status, 200, "page status")
    p("polls", n=2)
    g = wait_until("the grid matches _cat/shards", grid_matches, 20, step=0.5)
    eq(sorted(r["node"] for r in g["rows"]), NAMES, "a row per node")
    assert all(r["up"] for r in g["rows"]), g["rows"]
    eq(len(g["tiles"]), 3 * 2 + 2 * 2, "copies")
    assert all(t["row"] == t["node"] for t in g["tiles"]), "each copy in its node's row"
    assert all(t["state"] == "STARTED" for t in g["tiles"])
    eq(g["health"], "green", "health pill")
    ov = dict(g["overview"])
    eq(ov["documents"], "6,300", "overview documents")
    eq(ov["indices"], "2", "overview indices")
    eq(ov["master"], "node-1", "overview master")
    t = next(t for t in g["tiles"] if t["index"] == "ui" and t["prirep"] == "p")
    assert "docs" in t["text"] and ("KB" in t["text"] or "MB" in t["text"]), t["text"]
    d = p("click", index="ui", shard=t["shard"], node=t["node"])
    assert "primary" in d["text"] and t["node"] in d["text"], d["text"]


@test
def t06_console_total_is_count():
    p = page()
    for q in ({"query": {"match_all": {}}}, {"query": {"term": {"tag": "blue"}}},
              {"query": {"match": {"body": "word5"}}}):
        st, c = n1().req("POST", "/ui/_count", q)
        eq(st, 200, "count")
        body = dict(q, size=5)
        r = p("console", index="ui", body=json.dumps(body))
        eq(r["total"], c["count"], "console total for %s" % json.dumps(q))
        eq(len(r["shards"]), 3, "per-shard timings shown")


@test
def t07_nodes_and_latency_panels():
    p = page()
    p("polls", n=2)
    n = p("nodes")
    eq(sorted(c["node"] for c in n["cards"]), NAMES, "a card per node")
    for c in n["cards"]:
        assert "rss" in c["text"] and "accounted" in c["text"] and "free of" in c["text"], c["text"]
        assert "% of a core" in c["text"], c["text"]
    eq(len(n["rtt"]), 6, "round-trip matrix")
    assert sum(1 for x in n["rtt"] if "µs" in x["text"] or "ms" in x["text"]) >= 2, n["rtt"]
    lat = p("latency")
    assert "per_node" in lat["counters"] and "remote shard requests" in lat["counters"], lat
    ui = next(x for x in lat["indices"] if x["index"] == "ui")
    eq(ui["rows"][0][0].split()[0], "coordinator", "first row")
    assert int(ui["rows"][0][1].replace(",", "")) >= 18, ui["rows"][0]
    assert any("node-2" in r[0] for r in ui["rows"]) or any("node-3" in r[0] for r in ui["rows"]), ui


@test
def t08_screenshots():
    p = page()
    os.makedirs(SHOTS, exist_ok=True)
    for name, sel in (("overview", None), ("grid", "#shards"), ("page", "main")):
        path = os.path.join(SHOTS, "ui-%s.png" % name)
        r = p("shot", selector=sel, path=path) if sel else p("shot", upto="#overview", path=path)
        assert os.path.getsize(path) == r["bytes"] > 2000, r
        # a blank or one-colour image has a handful of colours; text,
        # tiles and bars give hundreds
        assert r["colours"] >= 64, "%s looks blank: %r" % (path, r)
        assert r["width"] >= 600 and r["height"] >= 60, r


@test
def t09_kill_shows_unassigned_within_5s():
    p = page()
    g = wait_until("the grid matches _cat/shards", grid_matches, 20, step=0.5)
    gone = {(t["index"], t["shard"]) for t in g["tiles"] if t["node"] == "node-3"}
    eq(len(gone), 3, "node-3 holds copies of ui/1, ui/2, logs/1")
    NODES["node-3"].kill()
    t0 = time.time()

    def shown():
        g = p("grid")
        on3 = [t for t in g["tiles"] if t["node"] == "node-3" and t["state"] == "STARTED"]
        lost = {(t["index"], t["shard"]) for t in g["tiles"] if t["state"] != "STARTED"}
        return g if not on3 and gone <= lost else None

    g = wait_until("node-3's copies unassigned in the grid", shown, 5, step=0.25)
    took = time.time() - t0
    print("     node-3's copies shown unassigned %.2fs after kill -9" % took)
    row = next(r for r in g["rows"] if r["node"] == "node-3")
    assert not row["up"], row
    un = next(t for t in g["tiles"] if t["state"] == "UNASSIGNED")
    d = p("click", index=un["index"], shard=un["shard"], node="", state="UNASSIGNED")
    assert "node-3" in d["text"] and "not reachable" in d["text"], d["text"]


@test
def t10_recovery_with_progress_bars():
    p = page()
    st, b = n1().req("GET", "/_cluster/health?wait_for_status=yellow&timeout=30s", timeout=40)
    eq((st, b["status"]), (200, "yellow"), "node-3's primaries replaced")
    # written while node-3 is away, then flushed: its copies fall out of the
    # in-sync set and the primaries' logs no longer reach back to them, so
    # node-3 recovers file-based, throttled to 300 KB/s
    bulk_docs("ui", 6000, 1000)
    n1().refresh("ui")
    st, b = n1().req("POST", "/ui/_flush")
    eq(st, 200, "flush")
    start("node-3", THROTTLE)
    seen = {}

    def running():
        for r in p("recoveries")["rows"]:
            if r["target"] == "node-3":
                seen.setdefault(r["stage"], r)
                if r["stage"] not in ("done", "failed") and r["bars"] and 0 <= min(r["bars"]) < 100:
                    return r
        return None

    try:
        r = wait_until("a running recovery on the page", running, 30, step=0.3)
    except AssertionError:
        print("     seen on the page: %r" % seen)
        print("     node-3 _cat/recovery: %r" % (NODES["node-3"].req("GET", "/_cat/recovery?format=json"),))
        raise
    eq(len(r["bars"]), 2, "a bytes bar and an operations bar")
    os.makedirs(SHOTS, exist_ok=True)
    shot = p("shot", selector="#recoveries", path=os.path.join(SHOTS, "ui-recovery.png"))
    assert shot["colours"] >= 64, shot
    # it finishes, and the page says so with full bars
    st, b = n1().req("GET", "/_cluster/health?wait_for_status=green&timeout=90s", timeout=100)
    st3, rows = NODES["node-3"].req("GET", "/_cat/recovery?format=json")
    print("     node-3's recoveries: %s" % "; ".join(
        "%s/%s %s %s bytes in %s" % (x["index"], x["shard"], x["type"], x["bytes"], x["time"]) for x in rows))
    eq((st, b["status"]), (200, "green"), "green again")

    def done():
        rows = [x for x in p("recoveries")["rows"] if x["target"] == "node-3"]
        return rows if rows and all(x["stage"] == "done" and x["bars"] == [100, 100] for x in rows) else None

    wait_until("finished recoveries at 100%", done, 10, step=0.5)
    wait_until("the grid matches _cat/shards again", grid_matches, 15, step=0.5)
    st, rows = NODES["node-3"].req("GET", "/_cat/recovery?format=json")
    assert any(x["type"] == "file_based" for x in rows), rows


@test
def t11_no_errors_and_weight():
    p = page()
    probs = p("problems")["problems"]
    eq(probs, [], "browser console errors")
    w = p("weight")
    assert 0 < w["total"] < MAX_WEIGHT, w
    print("     page weight %d bytes: %s" % (w["total"], ", ".join(
        "%s %d" % (u.rsplit("/", 1)[-1] or "index", b) for u, b in sorted(w["weight"].items()))))


USERS = {"reader": ("read-pw-1", ["read"]), "nobody": ("none-pw-1", [])}


def basic(user):
    import base64
    return {"Authorization": "Basic " + base64.b64encode(
        ("%s:%s" % (user, USERS[user][0])).encode()).decode()}


class ReaderNode(Node):
    """A solo node with --users; requests carry the reader's credentials
    unless headers say Authorization: None."""

    def raw(self, method, path, body=None, headers=None, timeout=60):
        h = basic("reader")
        h.update(headers or {})
        return Node.raw(self, method, path, body, {k: v for k, v in h.items() if v is not None},
                        timeout)


@test
def t12_behind_users():
    users = []
    for u, (pw, roles) in USERS.items():
        h = subprocess.run([shoal_bin(), "--hash-password"], input=(pw + "\n").encode(),
                           capture_output=True, timeout=30).stdout.decode().strip().splitlines()[-1]
        users.append({"username": u, "hash": h, "roles": roles})
    path = os.path.join(TMP, "users.json")
    with open(path, "w") as f:
        json.dump({"users": users}, f)
    with ReaderNode(args=["--users", path]) as solo:
        st, h, _ = solo.raw("GET", "/_shoal/ui/", headers={"Authorization": None})
        eq(st, 401, "the page needs credentials")
        assert "www-authenticate" in h, h
        for path_ in ("/_shoal/ui/", "/_shoal/ui/app.js", "/_shoal/stats/fanout", "/_shoal/stats/nodes"):
            st, _, _ = solo.raw("GET", path_, headers=basic("reader"))
            eq(st, 200, "reader " + path_)
            st, _, _ = solo.raw("GET", path_, headers=basic("nobody"))
            eq(st, 403, "no role " + path_)
        st, b = solo.req("GET", "/_shoal/stats/nodes", headers=basic("reader"))
        eq(b["security"], {"enabled": True, "user": "reader", "role": "read"}, "who")
        page()  # the browser
        d = Driver("http://127.0.0.1:%d/_shoal/ui/" % solo.port, "reader", USERS["reader"][0])
        eq(d.status, 200, "signed-in page")
        d("polls", n=2)
        who = d("text", selector="#whoami")["text"]
        eq(who, "signed in as reader (read)", "who is shown")
        probs = [x for x in d("problems")["problems"] if "401" not in x]
        eq(probs, [], "browser console errors behind --users")
        d.stop()
        d = Driver("http://127.0.0.1:%d/_shoal/ui/" % solo.port, "nobody", USERS["nobody"][0])
        eq(d.status, 403, "a user without roles gets no page")
        d.stop()


def teardown():
    rc = 0
    for d in DRIVERS:
        d.stop()
    if BROWSER:
        BROWSER.stop()
    for n in NODES.values():
        r = n.cleanup()
        if r not in (0, None):
            rc = r
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=420, teardown=teardown)
