"""Transport TLS between real processes. Certificates come from the openssl
CLI at test time: a cluster CA signs node-1, node-2 and coord; another CA
signs a rogue node's. The cluster file names the CA at the top and each
node's own cert and key in its entry (paths relative to the file). Checks:
the transport port speaks TLS, not SP in the clear; an index with 2 shards
and 1 replica is written and searched through every node (the coordinator
holds no data: its fan-out, and the replication between the two data
nodes, cross TLS); a node with a certificate from another CA is refused
(its log names the peer whose handshake failed, the members log the
handshakes they refused, its requests fail, the cluster stays green
without it); a killed member comes back and is dialed anew; a missing
certificate file, or a mistake in the tls keys, stops a node at start
saying which.

SHOAL_TLS_BENCH=N also times N searches through the coordinator over TLS
and over plain tcp (same data, same processes layout) and prints p50/p99."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shoal  # noqa: E402
from shoal import ClusterNode, cluster_file, eq, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-tls-test-")
CFILE = os.path.join(TMP, "cluster.json")
ALL = ["node-1", "node-2", "coord"]
NODES = {}
N_DOCS = 300
PORTS = {}


def openssl(*args):
    r = subprocess.run(["openssl"] + list(args), cwd=TMP, capture_output=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), r.stderr.decode()[-500:]))


def make_certs():
    """ca1 (the cluster's) signs the members, ca2 signs the rogue. EC P-256."""
    with open(os.path.join(TMP, "ca.cnf"), "w") as f:
        f.write("[req]\ndistinguished_name=dn\n[dn]\n[v3_ca]\n"
                "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
                "subjectKeyIdentifier=hash\n")
    with open(os.path.join(TMP, "node.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca1", "ca2"):
        openssl("req", "-x509", "-config", "ca.cnf", "-extensions", "v3_ca", *ec,
                "-keyout", ca + ".key", "-out", ca + ".pem", "-days", "2",
                "-subj", "/CN=shoal test " + ca)
    for name, ca in (("node-1", "ca1"), ("node-2", "ca1"), ("coord", "ca1"),
                     ("rogue", "ca2")):
        openssl("req", "-new", "-config", "ca.cnf", *ec, "-keyout", name + ".key",
                "-out", name + ".csr", "-subj", "/CN=" + name)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey",
                ca + ".key", "-CAcreateserial", "-days", "2", "-extfile", "node.ext",
                "-out", name + ".pem")


def write_cluster(path, tls=True, extra_nodes=()):
    """The cluster file of the three members; with tls, the CA at the top
    and each node's own cert and key in its entry."""
    spec = json.load(open(path)) if os.path.exists(path) else None
    if spec is None:
        ports = cluster_file(path, [("node-1", None), ("node-2", None),
                                    ("coord", ["coordinator"])])
        PORTS.update(ports)
        spec = json.load(open(path))
    for e in spec["nodes"]:
        e.pop("tls", None)
        if tls:
            e["tls"] = {"cert": e["name"] + ".pem", "key": e["name"] + ".key"}
    spec.pop("tls", None)
    if tls:
        spec["tls"] = {"ca": "ca1.pem", "verify": "required"}
    spec["nodes"] = [e for e in spec["nodes"] if e["name"] in ALL] + list(extra_nodes)
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)


def start(name, cfile=CFILE):
    data = os.path.join(TMP, "data-" + name)
    os.makedirs(data, exist_ok=True)
    args = ["--role", "coordinator"] if name in ("coord", "rogue") else []
    NODES[name] = ClusterNode(cfile, name, PORTS[name][0], data=data, args=args)
    return NODES[name]


def stop_all():
    rc = 0
    for n in list(NODES):
        r = NODES.pop(n).cleanup()
        if r not in (0, None):
            rc = r
    return rc


def green(node, n=3):
    st, b = NODES[node].req(
        "GET", "/_cluster/health?wait_for_status=green&wait_for_nodes=%d&timeout=30s" % n,
        timeout=40)
    eq((st, b.get("status"), b.get("number_of_nodes")), (200, "green", n), "health on " + node)


def load_docs():
    st, b = NODES["coord"].req("PUT", "/ix", {
        "settings": {"number_of_shards": 2, "number_of_replicas": 1},
        "mappings": {"properties": {"n": {"type": "long"}, "body": {"type": "text"},
                                    "tag": {"type": "keyword"}}}})
    eq(st, 200, "create through the coordinator: %s" % b)
    lines = []
    for i in range(N_DOCS):
        lines.append({"index": {"_index": "ix", "_id": str(i)}})
        lines.append({"n": i, "tag": "t%d" % (i % 5),
                      "body": " ".join(["alpha", "bravo", "charlie"][: 1 + i % 3])})
    st, b = NODES["node-1"].bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk through node-1")
    for n in ALL:
        green(n)


@test
def t01_certs_and_start():
    make_certs()
    write_cluster(CFILE)
    for n in ALL:
        start(n)
    for n in ALL:
        green(n)


@test
def t02_transport_speaks_tls():
    """An SP handshake in the clear gets no SP answer: the port wants a TLS
    ClientHello (it answers with an alert or closes)."""
    s = socket.create_connection(("127.0.0.1", PORTS["node-1"][1]), timeout=5)
    try:
        s.sendall(b"\x00SP\x00\x00\x30\x00\x00")
        got = b""
        t0 = time.time()
        while time.time() - t0 < 3:
            try:
                chunk = s.recv(64)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            got += chunk
        if got.startswith(b"\x00SP\x00"):
            raise AssertionError("the transport answered SP in the clear: %r" % got)
    finally:
        s.close()
    st, b = NODES["coord"].req("GET", "/_cluster/health")
    eq(b["number_of_nodes"], 3, "still 3 nodes")


@test
def t03_write_and_search_over_tls():
    load_docs()
    want_ids = None
    for n in ALL:
        st, b = NODES[n].req("GET", "/ix/_count")
        eq((st, b.get("count")), (200, N_DOCS), "count through " + n)
        st, b = NODES[n].req("POST", "/ix/_search", {
            "query": {"match": {"body": "charlie"}}, "sort": ["n"], "size": 200})
        eq(st, 200, "search through " + n)
        eq(b["_shards"], {"total": 2, "successful": 2, "skipped": 0, "failed": 0},
           "shards through " + n)
        ids = [h["_id"] for h in b["hits"]["hits"]]
        eq(len(ids), N_DOCS // 3, "hits through " + n)
        if want_ids is None:
            want_ids = ids
        eq(ids, want_ids, "same hits through " + n)
        st, b = NODES[n].req("POST", "/ix/_search", {
            "size": 0, "aggs": {"tags": {"terms": {"field": "tag"}}}})
        eq([(x["key"], x["doc_count"]) for x in b["aggregations"]["tags"]["buckets"]],
           [("t%d" % k, N_DOCS // 5) for k in range(5)], "terms through " + n)
    # both copies of each shard hold every document (replication over TLS)
    for fanout in ("per_shard", "per_node"):
        st, b = NODES["coord"].req("GET", "/ix/_count?fanout=" + fanout)
        eq(b.get("count"), N_DOCS, "count, fanout " + fanout)


@test
def t04_rogue_certificate_refused():
    """A node whose certificate comes from another CA (it trusts the
    cluster's CA itself, so it is the members that refuse it)."""
    rogue_file = os.path.join(TMP, "rogue.json")
    shutil.copy(CFILE, rogue_file)
    rhp, rtp = shoal.free_port(), shoal.free_port()
    PORTS["rogue"] = (rhp, rtp)
    write_cluster(rogue_file, extra_nodes=[{
        "name": "rogue", "http": "127.0.0.1:%d" % rhp, "transport": "127.0.0.1:%d" % rtp,
        "roles": ["coordinator"], "tls": {"cert": "rogue.pem", "key": "rogue.key"}}])
    rogue = start("rogue", rogue_file)
    st, b = rogue.req("PUT", "/intrusion")
    if st < 500:
        raise AssertionError("create through the rogue node: %s %s" % (st, b))
    st, b = rogue.req("GET", "/ix/_search")
    if st == 200 and b.get("hits", {}).get("total", {}).get("value"):
        raise AssertionError("the rogue node read documents: %s" % b)
    # its log names the members whose handshakes failed
    deadline = time.time() + 15
    want = "TLS handshake with peer tls+tcp://127.0.0.1:%d failed" % PORTS["node-1"][1]
    while time.time() < deadline and want not in rogue.log_tail(20000):
        time.sleep(0.2)
    if want not in rogue.log_tail(20000):
        raise AssertionError("no handshake warning in the rogue's log:\n" +
                             rogue.log_tail(3000))
    # and the members log the handshakes they refused
    want = "TLS handshake(s) on tls+tcp://127.0.0.1:%d since" % PORTS["node-1"][1]
    while time.time() < deadline + 5 and want not in NODES["node-1"].log_tail(20000):
        time.sleep(0.2)
    if want not in NODES["node-1"].log_tail(20000):
        raise AssertionError("no refused-handshake warning in node-1's log:\n" +
                             NODES["node-1"].log_tail(3000))
    st, _ = NODES["coord"].req("HEAD", "/intrusion")
    eq(st, 404, "nothing created")
    for n in ALL:
        green(n)
    st, b = NODES["coord"].req("GET", "/ix/_count")
    eq(b.get("count"), N_DOCS, "the cluster still serves")
    NODES.pop("rogue").cleanup()


@test
def t04b_member_restart_reconnects():
    """kill -9 a data node and start it again: the others dial it anew
    (new handshakes) and the cluster is green with every document."""
    NODES["node-2"].kill()
    st, b = NODES["coord"].req("GET", "/ix/_count")
    eq((st, b.get("count")), (200, N_DOCS), "count with node-2 down (replicas on node-1)")
    NODES["node-2"].start()
    for n in ALL:
        green(n)
    for n in ALL:
        st, b = NODES[n].req("GET", "/ix/_count")
        eq((st, b.get("count")), (200, N_DOCS), "count through %s after the restart" % n)


@test
def t05_missing_certificate_stops_the_node():
    bad_file = os.path.join(TMP, "missing.json")
    shutil.copy(CFILE, bad_file)
    spec = json.load(open(bad_file))
    spec["nodes"][2]["tls"]["cert"] = "no-such-cert.pem"
    json.dump(spec, open(bad_file, "w"))
    data = os.path.join(TMP, "data-missing")
    os.makedirs(data, exist_ok=True)
    r = subprocess.run([shoal.shoal_bin(), "--cluster", bad_file, "--name", "coord",
                        "--data", data, "--role", "coordinator", "--log-level", "warn"],
                       capture_output=True, timeout=30)
    if r.returncode == 0 or b"no-such-cert.pem" not in r.stderr:
        raise AssertionError("exit %s, stderr: %s" % (r.returncode, r.stderr[-2000:]))


@test
def t06_cluster_file_errors():
    """Mistakes in the tls keys stop the node at start, saying which."""
    cases = [
        (lambda sp: sp["tls"].update(verify="maybe"), "tls.verify"),
        (lambda sp: sp["tls"].update(certificate="x.pem"), "unknown key tls.certificate"),
        (lambda sp: sp["nodes"][2].pop("tls"), "has no tls.cert"),
        (lambda sp: sp["nodes"][2]["tls"].update(key=""), "tls.key must be a path"),
        (lambda sp: sp.update(tls="on"), "\"tls\" must be an object"),
    ]
    data = os.path.join(TMP, "data-bad")
    os.makedirs(data, exist_ok=True)
    for i, (change, want) in enumerate(cases):
        bad_file = os.path.join(TMP, "bad%d.json" % i)
        spec = json.load(open(CFILE))
        change(spec)
        json.dump(spec, open(bad_file, "w"))
        r = subprocess.run([shoal.shoal_bin(), "--cluster", bad_file, "--name", "coord",
                            "--data", data, "--role", "coordinator", "--log-level", "warn"],
                           capture_output=True, timeout=30)
        if r.returncode == 0 or want.encode() not in r.stderr:
            raise AssertionError("case %d: exit %s, stderr: %s" % (i, r.returncode,
                                                                  r.stderr[-1000:]))


def searches(node, n):
    body = {"query": {"match": {"body": "bravo"}}, "size": 10}
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        st, _ = node.req("POST", "/ix/_search", body)
        lat.append(time.perf_counter() - t0)
        eq(st, 200, "search")
    lat.sort()
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000


@test
def t07_bench_tls_vs_plain():
    n = int(os.environ.get("SHOAL_TLS_BENCH", "0"))
    if n <= 0:
        return
    out = {}
    for mode in ("tls", "plain", "tls", "plain"):
        stop_all()
        write_cluster(CFILE, tls=mode == "tls")
        for name in ALL:
            start(name)
        for name in ALL:
            green(name)
        searches(NODES["coord"], 50)  # warm
        out.setdefault(mode, []).append(searches(NODES["coord"], n))
    for mode, runs in out.items():
        for p50, p99 in runs:
            print("bench %-5s %d searches via the coordinator: p50 %.3f ms, p99 %.3f ms"
                  % (mode, n, p50, p99), flush=True)


def teardown():
    rc = stop_all()
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=150, teardown=teardown)
