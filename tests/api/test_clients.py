"""Real Elasticsearch/OpenSearch clients, unmodified, against a real node:
Debian's python3-elasticsearch 7.17 and the npm package
@opensearch-project/opensearch (installed here from the lock file)."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, run_tests, test  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = os.path.join(ROOT, "tests", "clients")
N = None


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
    against a 3-node cluster, with a replica per shard."""
    import tempfile
    tmp = tempfile.mkdtemp(prefix="shoal-clients-cluster-")
    names = ["node-1", "node-2", "node-3"]
    cfile = os.path.join(tmp, "cluster.json")
    ports = cluster_file(cfile, [(n, None) for n in names])
    nodes = []
    try:
        for n in names:
            d = os.path.join(tmp, n)
            os.makedirs(d)
            nodes.append(ClusterNode(cfile, n, ports[n][0], data=d))
        for x in nodes:
            st, b = x.req("GET", "/_cluster/health?wait_for_status=green&wait_for_nodes=3"
                          "&timeout=60s", timeout=80)
            assert st == 200 and b.get("status") == "green", b
        out = run(["/usr/bin/python3", os.path.join(CLIENTS, "es_flow.py"),
                   "http://127.0.0.1:%d" % nodes[1].port, "1"])
        assert "flow: ok" in out, out
    finally:
        rcs = [x.cleanup() for x in nodes]
        shutil.rmtree(tmp, ignore_errors=True)
    assert all(rc in (0, None) for rc in rcs), rcs


@test
def opensearch_js():
    npm = shutil.which("npm")
    nodejs = shutil.which("node")
    if not npm or not nodejs:
        raise AssertionError("node and npm are needed for the OpenSearch JS client test")
    if not os.path.isdir(os.path.join(CLIENTS, "node_modules", "@opensearch-project")):
        run([npm, "ci", "--no-audit", "--no-fund"], cwd=CLIENTS, timeout=300)
    out = run([nodejs, os.path.join(CLIENTS, "opensearch_flow.js"),
               "http://127.0.0.1:%d" % node().port], cwd=CLIENTS)
    assert "flow: ok" in out, out


def teardown():
    return N.stop() if N else 0


if __name__ == "__main__":
    run_tests(budget_s=300, teardown=teardown)
