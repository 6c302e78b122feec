"""Real Elasticsearch/OpenSearch clients, unmodified, against a real node
and a 3-node cluster: Debian's python3-elasticsearch 7.17, the Python
package index's elasticsearch 8.x and 9.x (pinned in
tests/clients/requirements-es8.txt / -es9.txt, installed into virtual
environments under build-clients/), and the npm packages
@opensearch-project/opensearch, @elastic/elasticsearch 8 and elasticdump
(installed here from the lock file)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, run_tests, test  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = os.path.join(ROOT, "tests", "clients")
N = None
TMP = tempfile.mkdtemp(prefix="shoal-clients-test-")
CL = {}


def node():
    global N
    if N is None:
        N = Node()
    return N


def run(cmd, cwd=None, timeout=180):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(cmd), p.returncode,
                                                         p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout


@test
def python_elasticsearch_7_17():
    out = run(["/usr/bin/python3", os.path.join(CLIENTS, "es_flow.py"),
               "http://127.0.0.1:%d" % node().port])
    assert "flow: ok" in out, out


@test
def python_elasticsearch_7_17_cluster():
    """The same flow (scan, reindex helper, point in time, by-query, tasks)
    against the 3-node cluster, with a replica per shard."""
    c = cluster3()
    out = run(["/usr/bin/python3", os.path.join(CLIENTS, "es_flow.py"),
               "http://127.0.0.1:%d" % c["node-2"].port, "1"])
    assert "flow: ok" in out, out


def py_client(major):
    """A virtual environment with the pinned elasticsearch-py MAJOR.x (and
    nothing else from the package index): its python."""
    env = os.path.join(ROOT, "build-clients", "py%d" % major)
    py = os.path.join(env, "bin", "python")
    want = os.path.join(CLIENTS, "requirements-es%d.txt" % major)
    stamp = os.path.join(env, "installed.txt")
    if not (os.path.exists(stamp) and open(stamp).read() == open(want).read()):
        shutil.rmtree(env, ignore_errors=True)
        run([sys.executable, "-m", "venv", env])
        run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", want],
            timeout=300)
        shutil.copyfile(want, stamp)
    return py


@test
def python_elasticsearch_8_on_a_cluster():
    c = cluster3()
    out = run([py_client(8), os.path.join(CLIENTS, "es_modern_flow.py")] +
              ["http://127.0.0.1:%d" % n.port for n in c.values()])
    assert "flow: ok (elasticsearch-py 8." in out, out


@test
def python_elasticsearch_9_on_a_cluster():
    c = cluster3()
    out = run([py_client(9), os.path.join(CLIENTS, "es_modern_flow.py")] +
              ["http://127.0.0.1:%d" % n.port for n in c.values()])
    assert "flow: ok (elasticsearch-py 9." in out, out


def npm_packages():
    """node, with tests/clients/node_modules installed from the lock file."""
    npm = shutil.which("npm")
    nodejs = shutil.which("node")
    if not npm or not nodejs:
        raise AssertionError("node and npm are needed for the JavaScript client tests")
    mods = os.path.join(CLIENTS, "node_modules")
    if not all(os.path.isdir(os.path.join(mods, p)) for p in
               ("@opensearch-project/opensearch", "@elastic/elasticsearch", "elasticdump")):
        run([npm, "ci", "--no-audit", "--no-fund"], cwd=CLIENTS, timeout=300)
    return nodejs


def cluster3():
    """A 3-node cluster, started once."""
    if not CL:
        cfile = os.path.join(TMP, "cluster.json")
        names = ["node-1", "node-2", "node-3"]
        ports = cluster_file(cfile, [(n, None) for n in names])
        for n in names:
            d = os.path.join(TMP, n)
            os.makedirs(d, exist_ok=True)
            CL[n] = ClusterNode(cfile, n, ports[n][0], data=d)
        for n in CL.values():
            st, b = n.req("GET", "/_cluster/health?wait_for_nodes=3&timeout=60s", timeout=80)
            eq((st, b.get("number_of_nodes")), (200, 3), "3 nodes")
    return CL


@test
def opensearch_js():
    nodejs = npm_packages()
    out = run([nodejs, os.path.join(CLIENTS, "opensearch_flow.js"),
               "http://127.0.0.1:%d" % node().port], cwd=CLIENTS)
    assert "flow: ok" in out, out


@test
def python_elasticsearch_sniffing_a_cluster():
    c = cluster3()
    expect = ",".join("127.0.0.1:%d" % n.port for n in c.values())
    out = run(["/usr/bin/python3", os.path.join(CLIENTS, "es_sniff_flow.py"),
               "http://127.0.0.1:%d" % c["node-1"].port, expect])
    assert "flow: ok" in out, out


@test
def elasticsearch_js_8_on_a_cluster():
    nodejs = npm_packages()
    c = cluster3()
    out = run([nodejs, os.path.join(CLIENTS, "elastic8_flow.js"),
               "http://127.0.0.1:%d" % c["node-2"].port], cwd=CLIENTS)
    assert "flow: ok" in out, out


@test
def elasticsearch_js_8_scroll_helpers():
    """helpers.scrollDocuments / helpers.scrollSearch on a solo node and on
    the 3-node cluster (tests/clients/elastic8_scroll_flow.js)."""
    nodejs = npm_packages()
    for port in (node().port, cluster3()["node-1"].port):
        out = run([nodejs, os.path.join(CLIENTS, "elastic8_scroll_flow.js"),
                   "http://127.0.0.1:%d" % port], cwd=CLIENTS)
        assert "flow: ok" in out, out


@test
def elasticdump_round_trip_on_a_cluster():
    """elasticdump exports an index's mapping and data from one node of a
    3-node cluster to files (its data export scrolls), and imports them
    into a new index through the other node."""
    npm_packages()
    c = cluster3()
    a, b = c["node-1"], c["node-2"]
    mapping = {"properties": {"title": {"type": "text"}, "tag": {"type": "keyword"},
                              "n": {"type": "long"}, "when": {"type": "date"}}}
    st, r = a.req("PUT", "/dump-src", {"settings": {"number_of_shards": 3,
                                                    "number_of_replicas": 1},
                                       "mappings": mapping})
    eq(st, 200, "create: %s" % r)
    docs = {"d%d" % i: {"title": "doc %d" % i, "tag": "t%d" % (i % 3), "n": i,
                        "when": "2026-12-%02d" % (i % 28 + 1)} for i in range(237)}
    lines = []
    for i, d in docs.items():
        lines += [{"index": {"_index": "dump-src", "_id": i}}, d]
    st, r = b.bulk(lines, params="?refresh=true")
    eq((st, r["errors"]), (200, False), "bulk")
    ed = os.path.join(CLIENTS, "node_modules", ".bin", "elasticdump")
    src = "http://127.0.0.1:%d/dump-src" % a.port
    dst = "http://127.0.0.1:%d/dump-dst" % b.port
    mfile, dfile = os.path.join(TMP, "mapping.json"), os.path.join(TMP, "data.json")
    run([ed, "--input=" + src, "--output=" + mfile, "--type=mapping"], cwd=CLIENTS)
    run([ed, "--input=" + src, "--output=" + dfile, "--type=data", "--limit=50"], cwd=CLIENTS)
    with open(dfile) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    eq(sorted(x["_id"] for x in rows), sorted(docs), "every document exported once")
    run([ed, "--input=" + mfile, "--output=" + dst, "--type=mapping"], cwd=CLIENTS)
    run([ed, "--input=" + dfile, "--output=" + dst, "--type=data"], cwd=CLIENTS)
    a.refresh("dump-dst")
    for n in (a, b):
        st, r = n.req("GET", "/dump-dst/_mapping")
        eq(r["dump-dst"]["mappings"], mapping, "the mapping came across")
        st, r = n.req("POST", "/dump-dst/_search", {"size": 300})
        eq({h["_id"]: h["_source"] for h in r["hits"]["hits"]}, docs, "the data came across")


def teardown():
    rc = N.stop() if N else 0
    for n in CL.values():
        rc = n.stop() or rc
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
