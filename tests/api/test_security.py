"""Authentication and roles (issue 7, "Security"): --users FILE, HTTP
Basic and ApiKey credentials, 401/403 shaped as Elasticsearch's, API keys
(create, use, list, invalidate, never above their creator), credentials
kept out of the log, a node without --users unchanged, a bad users file
refusing to start, the bind warning and 429 past http.max_open_connections.
"""
import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import (ClusterNode, Node, cluster_file, eq, error_is, free_port, run_tests,  # noqa: E402
                   shoal_bin, test)

PASSWORDS = {"alice": "Alice-pw-7Qx!", "bob": "Bob-pw-3Zk?", "carol": "Carol-pw-9Wm#"}
ROLES = {"alice": ["admin"], "bob": ["read"], "carol": ["read", "write"]}
TMP = tempfile.mkdtemp(prefix="shoal-security-")
_hashes = {}


def hash_password(pw):
    p = subprocess.run([shoal_bin(), "--hash-password"], input=(pw + "\n").encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode().strip()
    assert pw not in out and pw not in p.stderr.decode(), "password echoed"
    return out


def users_file(roles=None, name="users.json"):
    roles = roles or ROLES
    for u, pw in PASSWORDS.items():
        if u not in _hashes:
            _hashes[u] = hash_password(pw)
    doc = {"users": [{"username": u, "hash": _hashes[u], "roles": roles[u]} for u in PASSWORDS]}
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def basic(user, pw=None):
    raw = "%s:%s" % (user, PASSWORDS[user] if pw is None else pw)
    return {"Authorization": "Basic " + base64.b64encode(raw.encode()).decode()}


def apikey(encoded):
    return {"Authorization": "ApiKey " + encoded}


NOAUTH = {"Authorization": None}


class AuthNode(Node):
    """A node started with --users; requests carry `auth` headers unless
    the call gives its own Authorization (NOAUTH sends none)."""

    def __init__(self, users, args=(), auth=None, **kw):
        self.auth = auth if auth is not None else basic("alice")
        Node.__init__(self, args=["--users", users] + list(args), **kw)

    def raw(self, method, path, body=None, headers=None, timeout=60):
        h = dict(self.auth)
        h.update(headers or {})
        h = {k: v for k, v in h.items() if v is not None}
        return Node.raw(self, method, path, body, h, timeout)

    def log_text(self):
        with open(os.path.join(self.data, "test-node.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")


class AuthClusterNode(ClusterNode):
    """A cluster node started with --users, requests as in AuthNode."""

    def __init__(self, cfile, name, port, users, auth=None, **kw):
        self.auth = auth if auth is not None else basic("alice")
        ClusterNode.__init__(self, cfile, name, port, args=["--users", users], **kw)

    raw = AuthNode.raw


node = None


def setup():
    global node
    node = AuthNode(users_file(), args=["--log-level", "debug"])
    st, b = node.req("PUT", "/sec", {"settings": {"number_of_shards": 2}})
    assert st == 200, (st, b)
    st, b = node.bulk([{"index": {"_index": "sec", "_id": "1"}}, {"t": "one"},
                       {"index": {"_index": "sec", "_id": "2"}}, {"t": "two"}],
                      params="?refresh=true")
    assert st == 200 and not b["errors"], b


def is_401(resp, reason_part):
    st, h, data = resp
    eq(st, 401, "status")
    assert "www-authenticate" in h, h
    body = json.loads(data)
    error_is((st, body), 401, "security_exception", reason_part)
    eq(body["error"]["root_cause"][0]["reason"], body["error"]["reason"], "root cause reason")
    eq(body["error"]["header"]["WWW-Authenticate"][0], 'Basic realm="security" charset="UTF-8"',
       "header in body")


@test
def no_credentials_401():
    for method, path in (("GET", "/"), ("GET", "/sec/_search"), ("POST", "/_bulk"),
                         ("GET", "/_cluster/health"), ("GET", "/no_such_route/x/y/z"),
                         ("PUT", "/newindex")):
        is_401(node.raw(method, path, "{}" if method != "GET" else None, headers=NOAUTH),
               "missing authentication credentials for REST request [%s]" % path)
    # both challenges, as Elasticsearch sends them
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", node.port, timeout=10)
    c.request("GET", "/")
    r = c.getresponse()
    r.read()
    eq(r.status, 401, "status")
    eq(r.msg.get_all("WWW-Authenticate"), ['Basic realm="security" charset="UTF-8"', "ApiKey"],
       "WWW-Authenticate headers")
    c.close()
    # HEAD: the status and challenge, no body
    st, h, data = node.raw("HEAD", "/", headers=NOAUTH)
    eq(st, 401, "HEAD status")
    assert "www-authenticate" in h
    # a scheme we don't take is as good as none
    is_401(node.raw("GET", "/", headers={"Authorization": "Bearer abc"}),
           "missing authentication credentials")


@test
def wrong_credentials_401():
    is_401(node.raw("GET", "/sec/_search", headers=basic("alice", "wrong")),
           "unable to authenticate user [alice] for REST request [/sec/_search]")
    is_401(node.raw("GET", "/", headers={"Authorization": "Basic " + base64.b64encode(
        b"mallory:" + PASSWORDS["alice"].encode()).decode()}),
           "unable to authenticate user [mallory]")
    is_401(node.raw("GET", "/", headers={"Authorization": "Basic %%%"}), "unable to authenticate")
    is_401(node.raw("GET", "/", headers=apikey("bm9wZTpub3Bl")), "API key")
    # nothing was written by a refused write
    st, h, data = node.raw("PUT", "/sec/_doc/x", '{"t":"x"}', headers=basic("carol", "nope"))
    eq(st, 401, "refused write")
    st, b = node.req("GET", "/sec/_doc/x")
    eq(st, 404, "refused write left no document")


def forbidden(resp, action, who):
    st, h, data = resp
    body = json.loads(data) if data else None
    error_is((st, body), 403, "security_exception",
             "action [%s] is unauthorized for %s" % (action, who))
    assert "www-authenticate" not in h


@test
def roles_read_write_admin():
    bob, carol, alice = basic("bob"), basic("carol"), basic("alice")
    nd = "\n".join(json.dumps(x) for x in ({"index": {"_index": "sec", "_id": "9"}}, {"t": "n"})) + "\n"
    reads = [("GET", "/", None), ("GET", "/sec/_search", None),
             ("POST", "/sec/_search", '{"query":{"match_all":{}}}'), ("GET", "/sec/_count", None),
             ("GET", "/_cat/indices", None), ("GET", "/_cluster/health", None),
             ("GET", "/sec/_doc/1", None), ("POST", "/_mget", '{"docs":[{"_index":"sec","_id":"1"}]}'),
             ("GET", "/sec/_mapping", None), ("GET", "/_nodes/stats", None),
             ("POST", "/_msearch", '{"index":"sec"}\n{}\n')]
    writes = [("PUT", "/sec/_doc/w1", '{"t":"w"}', "indices:data/write/index"),
              ("POST", "/_bulk", nd, "indices:data/write/bulk"),
              ("POST", "/sec/_update/1", '{"doc":{"u":1}}', "indices:data/write/update"),
              ("POST", "/sec/_refresh", None, "indices:admin/refresh"),
              ("POST", "/sec/_delete_by_query", '{"query":{"ids":{"values":["w1"]}}}',
               "indices:data/write/delete/byquery"),
              ("DELETE", "/sec/_doc/9", None, "indices:data/write/delete")]
    admins = [("PUT", "/sec2", None, "indices:admin/create"),
              ("PUT", "/sec2/_mapping", '{"properties":{"n":{"type":"long"}}}',
               "indices:admin/mapping/put"),
              ("PUT", "/sec2/_settings", '{"index":{"refresh_interval":"2s"}}',
               "indices:admin/settings/update"),
              ("POST", "/sec2/_forcemerge", None, "indices:admin/forcemerge"),
              ("POST", "/sec2/_flush", None, "indices:admin/flush"),
              ("PUT", "/_cluster/settings",
               '{"transient":{"action.destructive_requires_name":true}}',
               "cluster:admin/settings/update"),
              ("POST", "/_security/api_key", '{"name":"k"}',
               "cluster:admin/xpack/security/api_key/create"),
              ("GET", "/_security/api_key", None, "cluster:admin/xpack/security/api_key/get"),
              ("DELETE", "/sec2", None, "indices:admin/delete")]
    hdr = {"Content-Type": "application/json"}
    for who, h in (("bob", bob), ("carol", carol), ("alice", alice)):
        for m, p, b in reads:
            st, _, data = node.raw(m, p, b, headers=dict(h, **hdr))
            eq(st, 200, "%s %s %s" % (who, m, p))
    for m, p, b, action in writes:
        forbidden(node.raw(m, p, b, headers=dict(bob, **hdr)), action, "user [bob]")
        st, _, data = node.raw(m, p, b, headers=dict(carol, **hdr))
        assert st in (200, 201), (m, p, st, data)
    for m, p, b, action in admins:
        for who, h in (("bob", bob), ("carol", carol)):
            forbidden(node.raw(m, p, b, headers=dict(h, **hdr)), action, "user [%s]" % who)
        st, _, data = node.raw(m, p, b, headers=dict(alice, **hdr))
        eq(st, 200, "alice %s %s: %s" % (m, p, data[:200]))
    # the identity endpoint, for every user
    for who, h in (("bob", bob), ("carol", carol), ("alice", alice)):
        st, b = node.req("GET", "/_security/_authenticate", headers=h)
        eq(st, 200, "authenticate")
        eq(b["username"], who, "username")
        eq(b["roles"], ROLES[who], "roles")
        eq(b["authentication_type"], "realm", "type")


def create_key(body, headers=None):
    st, b = node.req("POST", "/_security/api_key", body, headers=headers)
    assert st == 200, (st, b)
    for k in ("id", "name", "api_key", "encoded"):
        assert k in b, b
    eq(base64.b64decode(b["encoded"]).decode(), "%s:%s" % (b["id"], b["api_key"]), "encoded")
    return b


KEYS = []  # secrets handed out, checked against the log at the end


@test
def api_key_lifecycle():
    k = create_key({"name": "lifecycle-key", "expiration": "1d"})
    KEYS.append(k)
    assert k["expiration"] > time.time() * 1000 + 86000e3, k
    h = apikey(k["encoded"])
    st, b = node.req("GET", "/_security/_authenticate", headers=h)
    eq(st, 200, "authenticate with key")
    eq(b["authentication_type"], "api_key", "type")
    eq(b["api_key"], {"id": k["id"], "name": "lifecycle-key"}, "api_key")
    eq(b["username"], "alice", "owner")
    # the key holds its creator's role (admin) by default
    st, b = node.req("PUT", "/sec3", headers=h)
    eq(st, 200, "admin key creates an index")
    st, b = node.req("GET", "/_security/api_key?id=" + k["id"])
    eq(st, 200, "list")
    eq(len(b["api_keys"]), 1, "one key listed")
    listed = b["api_keys"][0]
    eq(listed["name"], "lifecycle-key", "name")
    eq(listed["invalidated"], False, "invalidated")
    eq(listed["username"], "alice", "username")
    text = json.dumps(b)
    assert k["api_key"] not in text and "argon2" not in text, "list shows a secret"
    st, b = node.req("GET", "/_security/api_key?name=lifecycle-key")
    eq([x["id"] for x in b["api_keys"]], [k["id"]], "list by name")
    # the key file holds a hash, not the key
    with open(os.path.join(node.data, "security", "api_keys.json")) as f:
        stored = f.read()
    assert k["id"] in stored and k["api_key"] not in stored and k["encoded"] not in stored
    st, b = node.req("DELETE", "/_security/api_key", {"ids": [k["id"]]})
    eq(st, 200, "invalidate")
    eq(b["invalidated_api_keys"], [k["id"]], "invalidated")
    eq(b["error_count"], 0, "error_count")
    is_401(node.raw("GET", "/sec/_search", headers=h), "API key")
    st, b = node.req("GET", "/_security/api_key?id=" + k["id"])
    eq(b["api_keys"][0]["invalidated"], True, "listed as invalidated")
    st, b = node.req("DELETE", "/_security/api_key", {"ids": [k["id"]]})
    eq(b["previously_invalidated_api_keys"], [k["id"]], "again")
    # by name
    k2 = create_key({"name": "by-name"})
    KEYS.append(k2)
    eq(node.req("GET", "/", headers=apikey(k2["encoded"]))[0], 200, "k2 works")
    st, b = node.req("DELETE", "/_security/api_key", {"name": "by-name"})
    eq(b["invalidated_api_keys"], [k2["id"]], "invalidate by name")
    is_401(node.raw("GET", "/", headers=apikey(k2["encoded"])), "API key")
    # malformed requests
    error_is(node.req("DELETE", "/_security/api_key", {}), 400,
             "action_request_validation_exception")
    error_is(node.req("POST", "/_security/api_key", {"role": "read"}), 400,
             "action_request_validation_exception", "name is required")
    error_is(node.req("POST", "/_security/api_key", {"name": "x", "role": "root"}), 400,
             "illegal_argument_exception")
    error_is(node.req("POST", "/_security/api_key", {"name": "x", "expiration": "forever"}), 400,
             "parsing_exception")


@test
def read_key_cannot_write():
    k = create_key({"name": "reader", "role": "read"})
    KEYS.append(k)
    h = dict(apikey(k["encoded"]), **{"Content-Type": "application/x-ndjson"})
    eq(node.req("GET", "/sec/_search", headers=h)[0], 200, "read key reads")
    nd = '{"index":{"_index":"sec","_id":"k"}}\n{"t":"k"}\n'
    forbidden(node.raw("POST", "/_bulk", nd, headers=h), "indices:data/write/bulk",
              "API key id [%s] of user [alice]" % k["id"])
    # role descriptors map onto our roles
    k2 = create_key({"name": "rd", "role_descriptors": {"w": {"cluster": ["monitor"], "indices": [
        {"names": ["*"], "privileges": ["read", "write"]}]}}})
    KEYS.append(k2)
    st, b = node.req("GET", "/_security/_authenticate", headers=apikey(k2["encoded"]))
    eq(b["role"], "write", "descriptors -> write")
    eq(node.raw("POST", "/_bulk", nd, headers=dict(apikey(k2["encoded"]),
       **{"Content-Type": "application/x-ndjson"}))[0], 200, "write key writes")
    forbidden(node.raw("PUT", "/sec4", None, headers=apikey(k2["encoded"])),
              "indices:admin/create", "API key id [%s]" % k2["id"])
    error_is(node.req("POST", "/_security/api_key", {"name": "x", "role_descriptors": {"r": {
        "indices": [{"names": ["logs-*"], "privileges": ["read"]}]}}}), 400,
        "illegal_argument_exception", "some indices")


@test
def key_never_above_its_creator():
    # only admins create keys; a write user is refused
    forbidden(node.raw("POST", "/_security/api_key", '{"name":"mine"}',
                       headers=dict(basic("carol"), **{"Content-Type": "application/json"})),
              "cluster:admin/xpack/security/api_key/create", "user [carol]")
    # a key made by an admin who is later demoted holds no more than the
    # creator's role now: restart with alice as a read user
    k = create_key({"name": "demoted"})
    KEYS.append(k)
    node.stop()
    node.args[node.args.index("--users") + 1] = users_file(
        dict(ROLES, alice=["read"]), name="users-demoted.json")
    node.auth = apikey(k["encoded"])
    node.start()
    st, b = node.req("GET", "/_security/_authenticate")
    eq(b["role"], "read", "demoted key")
    eq(node.req("GET", "/sec/_count")[0], 200, "still reads")
    forbidden(node.raw("PUT", "/sec5", None, headers=node.auth), "indices:admin/create",
              "API key id [%s]" % k["id"])
    node.stop()
    node.args[node.args.index("--users") + 1] = users_file()
    node.auth = basic("alice")
    node.start()
    eq(node.req("PUT", "/sec5")[0], 200, "alice is admin again")


@test
def python_client_with_credentials():
    """Debian's python3-elasticsearch 7.17 with http_auth and api_key."""
    k = create_key({"name": "client", "role": "read"})
    KEYS.append(k)
    p = subprocess.run(["/usr/bin/python3", "-c", CLIENT_FLOW, "http://127.0.0.1:%d" % node.port,
                        PASSWORDS["alice"], k["id"], k["api_key"]],
                       capture_output=True, text=True, timeout=60)
    assert "client: ok" in p.stdout, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])


@test
def credentials_absent_from_log():
    # one more 401 with a wrong password that looks like a real one, then grep
    node.raw("GET", "/", headers=basic("alice", "Wrong-pw-Secret-42"))
    node.raw("GET", "/", headers={"Authorization": "Basic " + base64.b64encode(
        PASSWORDS["bob"].encode()).decode()})  # no colon: a password alone
    log = node.log_text()
    assert "authentication failed" in log, "failures are logged"
    assert "/sec/_search" in log, "the access log runs at debug"
    needles = list(PASSWORDS.values()) + ["Wrong-pw-Secret-42"]
    for u in PASSWORDS:
        needles.append(basic(u)["Authorization"].split()[1])
    for k in KEYS:
        needles += [k["api_key"], k["encoded"]]
    assert len(KEYS) >= 4
    for n in needles:
        assert n not in log, "a credential appears in the log"


@test
def failed_logins_rate_limited_in_log():
    bad = apikey(base64.b64encode(b"x" * 20 + b":" + b"y" * 22).decode())
    before = node.log_text().count("authentication failed")
    t0 = time.time()
    for i in range(60):
        eq(node.raw("GET", "/", headers=bad)[0], 401, "bad key")
    secs = time.time() - t0
    time.sleep(1.1)
    node.raw("GET", "/", headers=bad)  # a new second: the count of the skipped is logged
    log = node.log_text()
    logged = log.count("authentication failed") - before
    assert 1 <= logged <= 10 * (int(secs) + 2) + 1, (logged, secs)
    if secs < 0.9:
        assert "more authentication failures were not logged" in log


@test
def no_users_node_unchanged():
    with Node() as n:
        st, h, data = n.raw("GET", "/")
        eq(st, 200, "anonymous GET /")
        assert "www-authenticate" not in h
        eq(n.req("PUT", "/x/_doc/1?refresh=true", {"a": 1})[0], 201, "anonymous write")
        # credentials are ignored, not an error
        eq(n.raw("GET", "/", headers=basic("alice", "whatever"))[0], 200, "ignored creds")
        error_is(n.req("GET", "/_security/_authenticate"), 400, "security_exception",
                 "--users")
        error_is(n.req("POST", "/_security/api_key", {"name": "k"}), 400, "security_exception")


@test
def cluster_mode_users_and_node_local_keys():
    cfile = os.path.join(TMP, "cluster.json")
    ports = cluster_file(cfile, [("n1", None), ("n2", None)])
    users = users_file()
    nodes = []
    try:
        for name in ("n1", "n2"):
            d = os.path.join(TMP, "cl-" + name)
            os.makedirs(d, exist_ok=True)
            nodes.append(AuthClusterNode(cfile, name, ports[name][0], users, data=d))
        a, b = nodes
        for n in nodes:
            is_401(n.raw("GET", "/_cluster/health", headers=NOAUTH), "missing authentication")
        st, r = a.req("PUT", "/cl", {"settings": {"number_of_shards": 2,
                                                  "number_of_replicas": 1}})
        eq(st, 200, "create through n1: %s" % r)
        st, r = b.req("GET", "/_cluster/health/cl?wait_for_status=green&timeout=20s", timeout=40)
        eq(st, 200, "green: %s" % r)
        # green on n2 can come before n2 has the index's metadata (a 503
        # "created but is not here yet"): a cluster matter, not ours
        deadline = time.time() + 10
        while True:
            st, r = b.req("PUT", "/cl/_doc/1?refresh=true", {"x": 1}, headers=basic("carol"))
            if st != 503 or time.time() > deadline:
                break
            time.sleep(0.1)
        eq(st, 201, "carol writes through n2: %s" % r)
        eq(a.req("GET", "/cl/_count", headers=basic("bob"))[1]["count"], 1, "bob counts on n1")
        forbidden(b.raw("DELETE", "/cl", None, headers=basic("carol")), "indices:admin/delete",
                  "user [carol]")
        # API keys are local to the node that made them (not replicated)
        st, k = a.req("POST", "/_security/api_key", {"name": "n1-key", "role": "read"})
        eq(st, 200, "key on n1")
        KEYS.append(k)
        eq(a.req("GET", "/cl/_search", headers=apikey(k["encoded"]))[0], 200, "key works on n1")
        is_401(b.raw("GET", "/cl/_search", headers=apikey(k["encoded"])), "API key")
    finally:
        rcs = [n.cleanup() for n in nodes]
    eq(rcs, [0, 0], "cluster nodes' exit codes")


def refuses(args, want):
    p = subprocess.run([shoal_bin(), "--solo", "--data", os.path.join(TMP, "refused"), "--http",
                        "127.0.0.1:%d" % free_port()] + args,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    err = p.stderr.decode()
    assert p.returncode != 0, "started with %s" % args
    lines = [l for l in err.splitlines() if l.strip()]
    eq(len(lines), 1, "one line of error: %r" % err)
    for w in want:
        assert w in lines[0], (w, lines[0])


@test
def bad_users_file_refuses_to_start():
    def write(name, text):
        path = os.path.join(TMP, name)
        with open(path, "w") as f:
            f.write(text)
        return path
    h = _hashes["alice"]
    missing = os.path.join(TMP, "nope.json")
    refuses(["--users", missing], [missing, "no such file"])
    p = write("b1.json", "{\"users\": [")
    refuses(["--users", p], [p, "not valid JSON"])
    p = write("b2.json", json.dumps({"users": [{"username": "a", "hash": h, "roles": ["root"]}]}))
    refuses(["--users", p], [p, "unknown role [root]"])
    p = write("b3.json", json.dumps({"users": [{"username": "a", "hash": "secret", "roles": []}]}))
    refuses(["--users", p], [p, "argon2"])
    p = write("b4.json", json.dumps({"users": []}))
    refuses(["--users", p], [p, "no users"])
    p = write("b5.json", json.dumps({"users": [{"username": "a", "roles": ["read"]}]}))
    refuses(["--users", p], [p, "hash"])


@test
def bind_warning():
    port = free_port()
    d = tempfile.mkdtemp(prefix="shoal-bind-", dir=TMP)
    for users, warned in (([], True), (["--users", users_file()], False)):
        proc = subprocess.Popen([shoal_bin(), "--solo", "--data", d, "--http",
                                 "0.0.0.0:%d" % port] + users,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 20
            ok = False
            while time.time() < deadline and not ok:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    ok = True
                except OSError:
                    time.sleep(0.05)
            assert ok, "node did not listen"
        finally:
            proc.terminate()
            out = proc.communicate(timeout=20)[0].decode()
        eq("HTTP is bound to 0.0.0.0 without authentication" in out, warned, "warning: %s" % out)
        eq(proc.returncode, 0, "clean exit")


def http_get(port, timeout=5):
    c = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        c.sendall(b"GET /_cluster/health HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                break
            buf += d
        head, _, rest = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        while len(rest) < length:
            d = c.recv(65536)
            if not d:
                break
            rest += d
        return int(head.split()[1]), head.decode("latin-1").lower(), rest
    finally:
        c.close()


@test
def too_many_connections_429():
    limit = 8
    with Node(args=["-E", "http.max_open_connections=%d" % limit]) as n:
        n.close_conn()
        time.sleep(0.2)
        idle = []
        try:
            for i in range(limit):
                idle.append(socket.create_connection(("127.0.0.1", n.port), timeout=5))
            time.sleep(0.3)  # let the server accept them all
            t0 = time.time()
            st, head, body = http_get(n.port)
            took = time.time() - t0
            eq(st, 429, "past the limit")
            assert took < 2, "429 took %.2fs" % took
            assert "connection: close" in head, head
            error_is((st, json.loads(body)), 429, "es_rejected_execution_exception",
                     "too many connections")
        finally:
            for s in idle:
                s.close()
        deadline = time.time() + 5
        st = None
        while time.time() < deadline:
            st = http_get(n.port)[0]
            if st == 200:
                break
            time.sleep(0.1)
        eq(st, 200, "served again once the idle sockets closed")


CLIENT_FLOW = r"""
import sys, warnings
warnings.simplefilter("ignore")
from elasticsearch import Elasticsearch, AuthenticationException, AuthorizationException
url, pw, kid, key = sys.argv[1:5]
es = Elasticsearch(url, http_auth=("alice", pw))
assert es.info()["version"]["number"] == "7.10.2"
es.index(index="cli", id="1", body={"a": 1}, refresh=True)
assert es.count(index="cli")["count"] == 1
ek = Elasticsearch(url, api_key=(kid, key))
assert ek.search(index="cli")["hits"]["total"]["value"] == 1
try:
    ek.index(index="cli", id="2", body={"a": 2})
    raise SystemExit("a read key wrote")
except AuthorizationException as e:
    assert e.status_code == 403, e
try:
    Elasticsearch(url, http_auth=("alice", "bad")).search(index="cli")
    raise SystemExit("a bad password passed")
except AuthenticationException as e:
    assert e.status_code == 401, e
print("client: ok")
"""


def teardown():
    rc = node.cleanup() if node else 0
    import shutil
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    setup()
    run_tests(budget_s=240, teardown=teardown)
