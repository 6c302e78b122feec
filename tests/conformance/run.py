#!/usr/bin/env python3
"""Runs YAML REST tests in Elasticsearch's format against a node.

    python3 tests/conformance/run.py --url http://localhost:9200 tests/conformance/*.yml

A file holds YAML documents: `setup` and `teardown` (lists of steps) and
tests (a name mapped to a list of steps). Steps: do, match, length,
is_true, is_false, gt, gte, lt, lte, set, contains, close_to, skip. Each
test runs setup, its steps, teardown, then the node is wiped (indices,
templates, pipelines, stored scripts). Standard library plus PyYAML.

API names are turned into requests by API_SPEC below: our own table of
the APIs Shoal serves (docs/api.md), written from Elasticsearch's public
REST API specification (paths, methods, path parts).
"""
import argparse
import http.client
import json
import os
import re
import sys
import time
import urllib.parse

try:
    import yaml
except ImportError:  # Debian: python3-yaml (cluster-scripts/install-deps.sh --with-tests)
    sys.stderr.write("run.py needs PyYAML: apt-get install python3-yaml\n")
    sys.exit(2)

class Loader(yaml.SafeLoader):
    """YAML as Elasticsearch's runner reads it: a date stays a string."""


Loader.yaml_implicit_resolvers = {
    k: [r for r in v if r[0] != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}

# What GET / answers (docs/api.md); `skip: version:` ranges compare to it.
SHOAL_ES_VERSION = (7, 10, 2)

# Runner features this runner implements; a test that asks for any other
# (among them every `shoal_differs_*`) is skipped.
FEATURES = {
    "headers", "catch_unauthorized", "warnings", "allowed_warnings", "warnings_regex",
    "allowed_warnings_regex", "contains", "close_to", "stash_in_path", "stash_in_key",
    "stash_path_replace", "embedded_stash_key", "default_shards", "node_selector",
    "arbitrary_key", "yaml", "is_after",
}

# API name -> list of (path, methods). Path parts are the {names} in the
# path; every other parameter goes in the query string. The first path
# whose parts are all given, with the most parts, wins.
API_SPEC = {
    "info": [("/", "GET")],
    "ping": [("/", "HEAD")],
    # documents
    "index": [("/{index}/_doc/{id}", "PUT,POST"), ("/{index}/_doc", "POST")],
    "create": [("/{index}/_create/{id}", "PUT,POST")],
    "get": [("/{index}/_doc/{id}", "GET")],
    "exists": [("/{index}/_doc/{id}", "HEAD")],
    "get_source": [("/{index}/_source/{id}", "GET")],
    "exists_source": [("/{index}/_source/{id}", "HEAD")],
    "delete": [("/{index}/_doc/{id}", "DELETE")],
    "update": [("/{index}/_update/{id}", "POST")],
    "mget": [("/_mget", "GET,POST"), ("/{index}/_mget", "GET,POST")],
    "bulk": [("/_bulk", "POST,PUT"), ("/{index}/_bulk", "POST,PUT")],
    # search
    "search": [("/_search", "GET,POST"), ("/{index}/_search", "GET,POST")],
    "count": [("/_count", "POST,GET"), ("/{index}/_count", "POST,GET")],
    "msearch": [("/_msearch", "GET,POST"), ("/{index}/_msearch", "GET,POST")],
    "scroll": [("/_search/scroll", "GET,POST"), ("/_search/scroll/{scroll_id}", "GET,POST")],
    "clear_scroll": [("/_search/scroll", "DELETE"), ("/_search/scroll/{scroll_id}", "DELETE")],
    "open_point_in_time": [("/{index}/_pit", "POST")],
    "close_point_in_time": [("/_pit", "DELETE")],
    "explain": [("/{index}/_explain/{id}", "GET,POST")],
    "field_caps": [("/_field_caps", "GET,POST"), ("/{index}/_field_caps", "GET,POST")],
    "indices.validate_query": [("/_validate/query", "GET,POST"),
                               ("/{index}/_validate/query", "GET,POST")],
    "search_template": [("/_search/template", "GET,POST"),
                        ("/{index}/_search/template", "GET,POST")],
    "msearch_template": [("/_msearch/template", "GET,POST"),
                         ("/{index}/_msearch/template", "GET,POST")],
    "render_search_template": [("/_render/template", "GET,POST"),
                               ("/_render/template/{id}", "GET,POST")],
    "put_script": [("/_scripts/{id}", "PUT,POST")],
    "get_script": [("/_scripts/{id}", "GET")],
    "delete_script": [("/_scripts/{id}", "DELETE")],
    "delete_by_query": [("/{index}/_delete_by_query", "POST")],
    "update_by_query": [("/{index}/_update_by_query", "POST")],
    "reindex": [("/_reindex", "POST")],
    "tasks.list": [("/_tasks", "GET")],
    "tasks.get": [("/_tasks/{task_id}", "GET")],
    "tasks.cancel": [("/_tasks/_cancel", "POST"), ("/_tasks/{task_id}/_cancel", "POST")],
    # indices
    "indices.create": [("/{index}", "PUT")],
    "indices.delete": [("/{index}", "DELETE")],
    "indices.exists": [("/{index}", "HEAD")],
    "indices.get": [("/{index}", "GET")],
    "indices.open": [("/{index}/_open", "POST")],
    "indices.close": [("/{index}/_close", "POST")],
    "indices.get_mapping": [("/_mapping", "GET"), ("/{index}/_mapping", "GET")],
    "indices.put_mapping": [("/{index}/_mapping", "PUT,POST")],
    "indices.get_settings": [("/_settings", "GET"), ("/{index}/_settings", "GET"),
                             ("/{index}/_settings/{name}", "GET"), ("/_settings/{name}", "GET")],
    "indices.put_settings": [("/_settings", "PUT"), ("/{index}/_settings", "PUT")],
    "indices.refresh": [("/_refresh", "POST,GET"), ("/{index}/_refresh", "POST,GET")],
    "indices.flush": [("/_flush", "POST,GET"), ("/{index}/_flush", "POST,GET")],
    "indices.forcemerge": [("/_forcemerge", "POST"), ("/{index}/_forcemerge", "POST")],
    "indices.stats": [("/_stats", "GET"), ("/_stats/{metric}", "GET"),
                      ("/{index}/_stats", "GET"), ("/{index}/_stats/{metric}", "GET")],
    "indices.analyze": [("/_analyze", "GET,POST"), ("/{index}/_analyze", "GET,POST")],
    "indices.put_alias": [("/{index}/_alias/{name}", "PUT,POST")],
    "indices.get_alias": [("/_alias", "GET"), ("/_alias/{name}", "GET"),
                          ("/{index}/_alias/{name}", "GET"), ("/{index}/_alias", "GET")],
    "indices.exists_alias": [("/_alias/{name}", "HEAD"), ("/{index}/_alias/{name}", "HEAD")],
    "indices.delete_alias": [("/{index}/_alias/{name}", "DELETE")],
    "indices.update_aliases": [("/_aliases", "POST")],
    "indices.put_template": [("/_template/{name}", "PUT,POST")],
    "indices.get_template": [("/_template", "GET"), ("/_template/{name}", "GET")],
    "indices.exists_template": [("/_template/{name}", "HEAD")],
    "indices.delete_template": [("/_template/{name}", "DELETE")],
    "indices.put_index_template": [("/_index_template/{name}", "PUT,POST")],
    "indices.get_index_template": [("/_index_template", "GET"), ("/_index_template/{name}", "GET")],
    "indices.exists_index_template": [("/_index_template/{name}", "HEAD")],
    "indices.delete_index_template": [("/_index_template/{name}", "DELETE")],
    "indices.simulate_index_template": [("/_index_template/_simulate_index/{name}", "POST")],
    "cluster.put_component_template": [("/_component_template/{name}", "PUT,POST")],
    "cluster.get_component_template": [("/_component_template", "GET"),
                                       ("/_component_template/{name}", "GET")],
    "cluster.exists_component_template": [("/_component_template/{name}", "HEAD")],
    "cluster.delete_component_template": [("/_component_template/{name}", "DELETE")],
    # cluster and nodes
    "cluster.health": [("/_cluster/health", "GET"), ("/_cluster/health/{index}", "GET")],
    "cluster.state": [("/_cluster/state", "GET"), ("/_cluster/state/{metric}", "GET"),
                      ("/_cluster/state/{metric}/{index}", "GET")],
    "cluster.get_settings": [("/_cluster/settings", "GET")],
    "cluster.put_settings": [("/_cluster/settings", "PUT")],
    "cluster.reroute": [("/_cluster/reroute", "POST")],
    "cluster.allocation_explain": [("/_cluster/allocation/explain", "GET,POST")],
    "nodes.info": [("/_nodes", "GET"), ("/_nodes/{node_id}", "GET"), ("/_nodes/{metric}", "GET"),
                   ("/_nodes/{node_id}/{metric}", "GET")],
    "nodes.stats": [("/_nodes/stats", "GET"), ("/_nodes/{node_id}/stats", "GET"),
                    ("/_nodes/stats/{metric}", "GET"), ("/_nodes/{node_id}/stats/{metric}", "GET")],
    "license.get": [("/_license", "GET")],
    "security.authenticate": [("/_security/_authenticate", "GET")],
    "security.create_api_key": [("/_security/api_key", "PUT,POST")],
    "security.get_api_key": [("/_security/api_key", "GET")],
    "security.invalidate_api_key": [("/_security/api_key", "DELETE")],
    "xpack.info": [("/_xpack", "GET")],
    # ingest
    "ingest.put_pipeline": [("/_ingest/pipeline/{id}", "PUT")],
    "ingest.get_pipeline": [("/_ingest/pipeline", "GET"), ("/_ingest/pipeline/{id}", "GET")],
    "ingest.delete_pipeline": [("/_ingest/pipeline/{id}", "DELETE")],
    "ingest.simulate": [("/_ingest/pipeline/_simulate", "GET,POST"),
                        ("/_ingest/pipeline/{id}/_simulate", "GET,POST")],
    "ingest.processor_grok": [("/_ingest/processor/grok", "GET")],
    # snapshots
    "snapshot.create_repository": [("/_snapshot/{repository}", "PUT,POST")],
    "snapshot.get_repository": [("/_snapshot", "GET"), ("/_snapshot/{repository}", "GET")],
    "snapshot.delete_repository": [("/_snapshot/{repository}", "DELETE")],
    "snapshot.verify_repository": [("/_snapshot/{repository}/_verify", "POST")],
    "snapshot.create": [("/_snapshot/{repository}/{snapshot}", "PUT,POST")],
    "snapshot.get": [("/_snapshot/{repository}/{snapshot}", "GET")],
    "snapshot.delete": [("/_snapshot/{repository}/{snapshot}", "DELETE")],
    "snapshot.restore": [("/_snapshot/{repository}/{snapshot}/_restore", "POST")],
    "snapshot.status": [("/_snapshot/_status", "GET"), ("/_snapshot/{repository}/_status", "GET"),
                        ("/_snapshot/{repository}/{snapshot}/_status", "GET")],
}
# the _cat APIs: /_cat/X and, for some, /_cat/X/{part}
for _cat, _part in (("indices", "index"), ("shards", "index"), ("count", "index"),
                    ("aliases", "name"), ("nodes", None), ("health", None),
                    ("allocation", "node_id"), ("master", None), ("recovery", "index"),
                    ("segments", "index"), ("templates", "name"), ("thread_pool", None),
                    ("pending_tasks", None), ("plugins", None), ("fielddata", "fields"),
                    ("nodeattrs", None), ("tasks", None), ("snapshots", "repository")):
    API_SPEC["cat." + _cat] = [("/_cat/" + _cat, "GET")] + (
        [("/_cat/%s/{%s}" % (_cat, _part), "GET")] if _part else [])

CATCHES = {
    "bad_request": lambda s: s == 400,
    "unauthorized": lambda s: s == 401,
    "forbidden": lambda s: s == 403,
    "missing": lambda s: s == 404,
    "request_timeout": lambda s: s == 408,
    "conflict": lambda s: s == 409,
    "unavailable": lambda s: s == 503,
    # any other error, as Elasticsearch's runner reads it
    "request": lambda s: s >= 400 and s not in (400, 401, 403, 404, 408, 409),
}


class Failure(Exception):
    pass


class Skip(Exception):
    pass


# ---------- values, paths, stash ----------

def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def same(expected, actual):
    """Deep equality where 1 == 1.0 but True != 1."""
    if _is_num(expected) and _is_num(actual):
        return float(expected) == float(actual)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, dict) and isinstance(actual, dict):
        return (set(expected) == set(actual) and
                all(same(expected[k], actual[k]) for k in expected))
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(same(a, b) for a, b in zip(expected, actual))
    return type(expected) is type(actual) and expected == actual


def regex_of(v):
    """The pattern of a `/regex/` string value, else None. A match compiles
    it as Java's COMMENTS flag does (re.X: white space and # comments in
    the pattern are ignored); a catch compiles it plain."""
    if isinstance(v, str):
        s = v.strip()
        if len(s) >= 2 and s.startswith("/") and s.endswith("/"):
            return s[1:-1]
    return None


class Context:
    def __init__(self, client):
        self.client = client
        self.stash = {}
        self.status = None
        self.body = None
        self.headers = {}

    def reset(self):
        self.stash = {}
        self.status = self.body = None

    # $name, ${name} and $body
    def stash_value(self, key):
        if key == "$body":
            return self.body
        name = key[2:-1] if key.startswith("${") else key[1:]
        if name not in self.stash:
            raise Failure("stash has no [%s]" % name)
        return self.stash[name]

    def resolve(self, v):
        if isinstance(v, str):
            if re.fullmatch(r"\$[A-Za-z_][\w.]*", v) or re.fullmatch(r"\$\{[^}]+\}", v):
                if v == "$body" or v[1:].strip("{}") in self.stash:
                    return self.stash_value(v)
                return v
            return re.sub(r"\$\{([^}]+)\}",
                          lambda m: str(self.stash[m.group(1)]) if m.group(1) in self.stash
                          else m.group(0), v)
        if isinstance(v, list):
            return [self.resolve(x) for x in v]
        if isinstance(v, dict):
            return {self.resolve(k) if isinstance(k, str) else k: self.resolve(x)
                    for k, x in v.items()}
        return v

    def path_parts(self, path):
        if path in ("", "$body"):
            return []
        parts, cur, i = [], "", 0
        while i < len(path):
            c = path[i]
            if c == "\\" and i + 1 < len(path) and path[i + 1] == ".":
                cur += "."
                i += 2
                continue
            if c == ".":
                parts.append(cur)
                cur = ""
            else:
                cur += c
            i += 1
        parts.append(cur)
        return [self.resolve(p) for p in parts]

    def lookup(self, path, source=None):
        """The value at a dotted path of the last response body; raises
        KeyError when it is absent."""
        obj = self.body if source is None else source
        if isinstance(path, str) and path.startswith("$") and path != "$body" and "." not in path:
            return self.stash_value(path)
        for p in self.path_parts(path):
            if isinstance(p, (int, float)) and not isinstance(p, bool):
                p = str(int(p))
            if isinstance(obj, list):
                try:
                    obj = obj[int(p)]
                except (ValueError, IndexError):
                    raise KeyError(path)
            elif isinstance(obj, dict):
                if p == "_arbitrary_key_":
                    if not obj:
                        raise KeyError(path)
                    return next(iter(obj))
                if p not in obj:
                    raise KeyError(path)
                obj = obj[p]
            else:
                raise KeyError(path)
        return obj


# ---------- HTTP ----------

class Client:
    def __init__(self, url, timeout=60):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 9200
        self.timeout = timeout
        self.conn = None

    def close(self):
        if self.conn:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, headers=None):
        hdrs = {}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        for attempt in range(2):
            if not self.conn:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                resp = self.conn.getresponse()
                data = resp.read()
                h = {k.lower(): v for k, v in resp.getheaders()}
                if h.get("connection", "").lower() == "close":
                    self.close()
                return resp.status, h, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def json(self, method, path, body=None):
        st, h, data = self.request(method, path, None if body is None else json.dumps(body))
        try:
            return st, json.loads(data) if data else None
        except ValueError:
            return st, data.decode("utf-8", "replace")


def qvalue(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(qvalue(x) for x in v)
    return str(v)


def build_request(api, params):
    """(method, url, body bytes or None, content type) for an API call."""
    if api not in API_SPEC:
        raise Skip("API [%s] is not in the runner's table" % api)
    params = dict(params)
    if "type" in params or params.get("include_type_name") in (True, "true"):
        # the deprecated typed forms (/{index}/{type}/{id}, include_type_name):
        # Shoal serves the typeless API only (docs/api.md)
        raise Skip("mapping types: Shoal serves the typeless API only (shoal_differs_types)")
    body = params.pop("body", None)
    ignore = params.pop("ignore", None)
    paths = API_SPEC[api]
    best = None
    for path, methods in paths:
        parts = re.findall(r"\{(\w+)\}", path)
        if all(p in params for p in parts) and (best is None or len(parts) > len(best[2])):
            best = (path, methods.split(","), parts)
    if best is None:
        raise Failure("no path of [%s] fits the parameters %s" % (api, sorted(params)))
    path, methods, parts = best
    url = path
    for p in parts:
        url = url.replace("{%s}" % p, urllib.parse.quote(qvalue(params.pop(p)), safe=",*"))
    if params:
        url += "?" + urllib.parse.urlencode({k: qvalue(v) for k, v in params.items()})
    method = methods[0]
    if body is not None and "GET" in methods and "POST" in methods:
        method = "POST"
    data, ctype = None, None
    if body is not None:
        if isinstance(body, list):  # NDJSON: bulk, msearch
            data = "".join((x if isinstance(x, str) else json.dumps(x)).rstrip("\n") + "\n"
                           for x in body)
            ctype = "application/x-ndjson"
        elif isinstance(body, str):
            data = body
            ctype = "application/x-ndjson" if api in ("bulk", "msearch", "msearch_template") \
                else "application/json"
        else:
            data = json.dumps(body)
            ctype = "application/json"
        data = data.encode()
    return method, url, data, ctype, ignore


# ---------- steps ----------

def describe(step):
    s = json.dumps(step, default=str)
    return s if len(s) <= 160 else s[:157] + "..."


def check_skip(spec, where):
    """Raises Skip when a `skip` (or `requires`) section says so."""
    if not isinstance(spec, dict):
        return
    reason = spec.get("reason", "")
    feats = spec.get("features") or spec.get("test_runner_features") or []
    if isinstance(feats, str):
        feats = [feats]
    missing = [f for f in feats if f not in FEATURES]
    if missing:
        raise Skip("features %s not supported%s" % (missing, ": " + reason if reason else ""))
    if spec.get("awaits_fix"):
        raise Skip("awaits_fix: %s" % spec["awaits_fix"])
    if spec.get("cluster_features"):
        raise Skip("cluster_features %s" % spec["cluster_features"])
    ver = spec.get("version")
    if ver:
        if version_in(str(ver)):
            raise Skip("version %s: %s" % (ver, reason))


def parse_version(s, low):
    s = s.strip()
    if not s:
        return (0, 0, 0) if low else (99, 99, 99)
    nums = [int(re.match(r"\d+", x).group()) for x in s.split(".")[:3] if re.match(r"\d+", x)]
    while len(nums) < 3:
        nums.append(0 if low else 99)
    return tuple(nums)


def version_in(spec):
    if spec.strip() == "all":
        return True
    for r in spec.split(","):
        if "-" not in r:
            if parse_version(r, True) == SHOAL_ES_VERSION:
                return True
            continue
        lo, hi = r.split("-", 1)
        if parse_version(lo, True) <= SHOAL_ES_VERSION <= parse_version(hi, False):
            return True
    return False


def do_step(ctx, spec):
    spec = dict(spec)
    catch = spec.pop("catch", None)
    headers = ctx.resolve(spec.pop("headers", None) or {})
    for k in ("warnings", "allowed_warnings", "warnings_regex", "allowed_warnings_regex",
              "node_selector"):
        spec.pop(k, None)
    if len(spec) != 1:
        raise Failure("a do step names one API, got %s" % sorted(spec))
    api, params = next(iter(spec.items()))
    params = ctx.resolve(params or {})
    method, url, data, ctype, ignore = build_request(api, params)
    hdrs = {}
    if ctype:
        hdrs["Content-Type"] = ctype
    hdrs.update({k: str(v) for k, v in headers.items()})
    st, h, raw = ctx.client.request(method, url, data, hdrs)
    ctx.status, ctx.headers = st, h
    if method == "HEAD":
        ctx.body = st == 200
    elif not raw:
        ctx.body = ""
    elif "json" in h.get("content-type", "") or raw[:1] in (b"{", b"["):
        try:
            ctx.body = json.loads(raw)
        except ValueError:
            ctx.body = raw.decode("utf-8", "replace")
    elif "yaml" in h.get("content-type", ""):
        ctx.body = yaml.load(raw, Loader=Loader)
    else:
        ctx.body = raw.decode("utf-8", "replace")
    where = "%s %s" % (method, url)
    ignored = ignore if isinstance(ignore, list) else ([ignore] if ignore is not None else [])
    if catch is None:
        if st >= 400 and not (method == "HEAD" and st == 404) and st not in ignored:
            raise Failure("%s answered %d: %s" % (where, st, short(ctx.body)))
        return
    if catch == "param":
        raise Skip("catch: param (a client-side check)")
    rx = regex_of(catch)
    if rx is not None:
        text = ctx.body if isinstance(ctx.body, str) else json.dumps(ctx.body)
        if st < 400:
            raise Failure("%s: expected an error matching %s, got %d" % (where, catch, st))
        # a catch pattern is plain (Elasticsearch's runner compiles it
        # without COMMENTS, unlike a match pattern)
        if not re.search(rx, text):
            raise Failure("%s: error %s does not match %s" % (where, short(text), catch))
        return
    if catch not in CATCHES:
        raise Failure("unknown catch [%s]" % catch)
    if not CATCHES[catch](st):
        raise Failure("%s: expected catch %s, got %d: %s" % (where, catch, st, short(ctx.body)))


def short(v, n=400):
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= n else s[:n] + "..."


def get(ctx, path):
    try:
        return ctx.lookup(path)
    except KeyError:
        raise Failure("[%s] is absent in %s" % (path, short(ctx.body)))


def match_value(ctx, path, expected):
    expected = ctx.resolve(expected)
    rx = regex_of(expected)
    if path == "$body" and rx is None and isinstance(ctx.body, str) is False:
        actual = ctx.body
    else:
        try:
            actual = ctx.lookup(path)
        except KeyError:
            if expected is None:
                return
            raise Failure("match [%s]: expected %s, absent in %s" %
                          (path, short(expected), short(ctx.body)))
    if rx is not None:
        text = actual if isinstance(actual, str) else json.dumps(actual) \
            if isinstance(actual, (dict, list)) else str(actual).lower() \
            if isinstance(actual, bool) else str(actual)
        if not re.search(rx, text, re.X):
            raise Failure("match [%s]: %r does not match %s" % (path, short(text), expected))
        return
    if not same(expected, actual):
        raise Failure("match [%s]: expected %s, got %s" % (path, short(expected), short(actual)))


def falsy(v):
    return v is None or v is False or (isinstance(v, str) and v in ("", "false", "0")) \
        or (_is_num(v) and v == 0)


def compare(ctx, op, path, limit):
    limit = ctx.resolve(limit)
    actual = get(ctx, path)
    if not (_is_num(actual) or isinstance(actual, str)):
        raise Failure("%s [%s]: %s is not a number" % (op, path, short(actual)))
    try:
        a, b = float(actual), float(limit)
    except (TypeError, ValueError):
        a, b = actual, limit
    ok = {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]
    if not ok:
        raise Failure("%s [%s]: %s is not %s %s" % (op, path, actual, op, limit))


def contains(actual, expected):
    if isinstance(actual, list):
        for x in actual:
            if same(expected, x):
                return True
            if isinstance(expected, dict) and isinstance(x, dict) and \
                    all(k in x and same(v, x[k]) for k, v in expected.items()):
                return True
        return False
    if isinstance(actual, dict) and isinstance(expected, dict):
        return all(k in actual and same(v, actual[k]) for k, v in expected.items())
    if isinstance(actual, str) and isinstance(expected, str):
        return expected in actual
    return False


def run_step(ctx, step):
    if not isinstance(step, dict) or len(step) != 1:
        raise Failure("a step is a map of one key: %s" % describe(step))
    kind, arg = next(iter(step.items()))
    if kind == "skip" or kind == "requires":
        check_skip(arg, "test")
    elif kind == "do":
        do_step(ctx, arg)
    elif kind == "match":
        for path, exp in arg.items():
            match_value(ctx, path, exp)
    elif kind == "length":
        for path, n in arg.items():
            v = get(ctx, path)
            n = ctx.resolve(n)
            if not hasattr(v, "__len__") or len(v) != n:
                raise Failure("length [%s]: expected %s, got %s (%s)" %
                              (path, n, len(v) if hasattr(v, "__len__") else "no length",
                               short(v)))
    elif kind == "is_true":
        try:
            v = ctx.lookup(arg)
        except KeyError:
            raise Failure("is_true [%s]: absent in %s" % (arg, short(ctx.body)))
        if falsy(v):
            raise Failure("is_true [%s]: got %s" % (arg, short(v)))
    elif kind == "is_false":
        try:
            v = ctx.lookup(arg)
        except KeyError:
            return
        if not falsy(v):
            raise Failure("is_false [%s]: got %s" % (arg, short(v)))
    elif kind in ("gt", "gte", "lt", "lte"):
        for path, limit in arg.items():
            compare(ctx, kind, path, limit)
    elif kind == "set":
        for path, name in arg.items():
            ctx.stash[name] = get(ctx, path)
    elif kind == "contains":
        for path, exp in arg.items():
            v = get(ctx, path)
            if not contains(v, ctx.resolve(exp)):
                raise Failure("contains [%s]: %s not in %s" % (path, short(exp), short(v)))
    elif kind == "close_to":
        for path, spec in arg.items():
            v = get(ctx, path)
            if not _is_num(v) or abs(v - spec["value"]) > spec.get("error", 1e-9):
                raise Failure("close_to [%s]: %s is not %s ± %s" %
                              (path, v, spec["value"], spec.get("error")))
    elif kind == "exists":
        get(ctx, arg)
    elif kind == "not_exists":
        try:
            ctx.lookup(arg)
        except KeyError:
            return
        raise Failure("not_exists [%s]: present" % arg)
    else:
        raise Skip("step [%s] not supported" % kind)


# ---------- cleanup between tests ----------

def wipe(client):
    """Removes what tests leave: indices, templates, pipelines, stored
    scripts and repositories, scrolls; transient cluster settings are the
    tests' own teardown's job."""
    client.json("DELETE", "/_search/scroll/_all")
    st, rows = client.json("GET", "/_cat/indices?format=json&h=index&expand_wildcards=all")
    if st == 200 and isinstance(rows, list) and rows:
        names = sorted(r["index"] for r in rows)
        for i in range(0, len(names), 50):
            client.json("DELETE", "/" + urllib.parse.quote(",".join(names[i:i + 50]), safe=",")
                        + "?expand_wildcards=all")
    st, b = client.json("GET", "/_index_template")
    if st == 200 and isinstance(b, dict):
        for t in b.get("index_templates", []):
            client.json("DELETE", "/_index_template/" + urllib.parse.quote(t["name"]))
    st, b = client.json("GET", "/_component_template")
    if st == 200 and isinstance(b, dict):
        for t in b.get("component_templates", []):
            client.json("DELETE", "/_component_template/" + urllib.parse.quote(t["name"]))
    st, b = client.json("GET", "/_template")
    if st == 200 and isinstance(b, dict):
        for name in b:
            client.json("DELETE", "/_template/" + urllib.parse.quote(name))
    st, b = client.json("GET", "/_ingest/pipeline")
    if st == 200 and isinstance(b, dict):
        for name in b:
            client.json("DELETE", "/_ingest/pipeline/" + urllib.parse.quote(name))
    st, b = client.json("GET", "/_snapshot")
    if st == 200 and isinstance(b, dict):
        for name in b:
            client.json("DELETE", "/_snapshot/" + urllib.parse.quote(name))


# ---------- files ----------

def load_file(path):
    """(setup, teardown, [(name, steps)]) of one YAML test file."""
    setup, teardown, tests = [], [], []
    with open(path) as f:
        for doc in yaml.load_all(f, Loader=Loader):
            if not doc:
                continue
            for name, steps in doc.items():
                if name == "setup":
                    setup = steps or []
                elif name == "teardown":
                    teardown = steps or []
                else:
                    tests.append((str(name), steps or []))
    return setup, teardown, tests


def run_steps(ctx, steps, phase):
    for i, step in enumerate(steps):
        try:
            run_step(ctx, step)
        except Failure as e:
            raise Failure("%s step %d %s: %s" % (phase, i + 1, describe(step), e))


def run_file(client, path, name_filter=None, out=print):
    """Runs one file; returns a list of result dicts {id, status, detail}."""
    # ids name the file by its folder too when it is in one of Elasticsearch's
    # per-API folders (search/10_basic.yml); ours are flat
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    fname = os.path.basename(path) if parent == "conformance" else \
        "%s/%s" % (parent, os.path.basename(path))
    results = []
    try:
        setup, teardown, tests = load_file(path)
    except (yaml.YAMLError, OSError, AttributeError) as e:
        results.append({"id": fname, "status": "failed", "detail": "cannot load: %s" % e})
        return results
    file_skip = None
    for step in setup:
        if isinstance(step, dict) and ("skip" in step or "requires" in step):
            try:
                check_skip(step.get("skip") or step.get("requires"), "file")
            except Skip as e:
                file_skip = str(e)
    for name, steps in tests:
        tid = "%s::%s" % (fname, name)
        if name_filter and not re.search(name_filter, tid):
            continue
        ctx = Context(client)
        res = {"id": tid, "status": "passed", "detail": ""}
        t0 = time.time()
        started = False
        try:
            if file_skip:
                raise Skip(file_skip)
            if steps and isinstance(steps[0], dict) and ("skip" in steps[0] or
                                                         "requires" in steps[0]):
                check_skip(steps[0].get("skip") or steps[0].get("requires"), "test")
            started = True
            run_steps(ctx, [s for s in setup if not (isinstance(s, dict) and
                                                     ("skip" in s or "requires" in s))], "setup")
            run_steps(ctx, steps, "test")
        except Skip as e:
            res.update(status="skipped", detail=str(e))
        except Failure as e:
            res.update(status="failed", detail=str(e))
        except (OSError, http.client.HTTPException) as e:
            client.close()
            res.update(status="failed", detail="connection: %s" % e)
        if started:  # a test skipped before its setup left nothing behind
            try:
                run_steps(ctx, teardown, "teardown")
            except (Failure, Skip) as e:
                if res["status"] == "passed":
                    res.update(status="failed", detail=str(e))
            except (OSError, http.client.HTTPException) as e:
                client.close()
            try:
                wipe(client)
            except (OSError, http.client.HTTPException):
                client.close()
        res["seconds"] = round(time.time() - t0, 3)
        results.append(res)
        out("%-7s %s%s%s" % (res["status"].upper() if res["status"] == "failed" else res["status"],
                             tid, " (%.1fs)" % res["seconds"] if res["seconds"] >= 0.5 else "",
                             ("\n        " + res["detail"]) if res["detail"] else ""))
    return results


def load_known(path):
    """known_failures.txt: `[MODE:]file.yml::test name | reason (#issue)`
    per line, # comments. MODE (solo, cluster) limits an entry to a run."""
    known = {}
    if not path or not os.path.exists(path):
        return known
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            tid, _, why = line.partition(" | ")
            mode = None
            m = re.match(r"(solo|cluster):(.*)", tid)
            if m:
                mode, tid = m.group(1), m.group(2)
            known[(mode, tid.strip())] = why.strip()
    return known


def summarize(results, known=None, mode=None, out=print):
    """Prints totals and failures by cause; returns (unexpected failures,
    listed failures that now pass)."""
    known = known or {}

    def listed(tid):
        return (mode, tid) in known or (None, tid) in known

    n = {"passed": 0, "failed": 0, "skipped": 0}
    for r in results:
        n[r["status"]] += 1
    files = len({r["id"].split("::")[0] for r in results})
    unexpected = [r for r in results if r["status"] == "failed" and not listed(r["id"])]
    known_failed = [r for r in results if r["status"] == "failed" and listed(r["id"])]
    fixed = [r for r in results if r["status"] == "passed" and listed(r["id"])]
    per_file = {}
    for r in results:
        f = per_file.setdefault(r["id"].split("::")[0], {"passed": 0, "failed": 0, "skipped": 0})
        f[r["status"]] += 1
    out("")
    for name, f in per_file.items():
        out("  %-45s %3d passed %3d failed %3d skipped" %
            (name, f["passed"], f["failed"], f["skipped"]))
    out("\n%d files, %d tests: %d passed, %d failed, %d skipped" %
        (files, len(results), n["passed"], n["failed"], n["skipped"]))
    if known:
        out("known failures: %d still failing, %d listed now pass, %d unlisted failures" %
            (len(known_failed), len(fixed), len(unexpected)))
        for r in fixed:
            out("  NOW PASSES (remove from known_failures.txt): %s" % r["id"])
        for r in unexpected:
            out("  UNLISTED FAILURE: %s\n      %s" % (r["id"], r["detail"]))
    return unexpected, fixed


def cause_of(detail):
    """A failure's cause, for grouping: the error reason of a refused call
    (bracketed names and numbers left out), else the assertion that failed
    with its path."""
    m = re.search(r"answered (\d+): (.*)", detail, re.S)
    if m:
        reason = re.search(r'"reason": "((?:[^"\\]|\\.)*)"', m.group(2))
        text = reason.group(1) if reason else m.group(2)
        text = re.sub(r"\[[^\]]*\]", "[]", text)
        return "HTTP %s %s" % (m.group(1), re.sub(r"\d+", "N", text)[:90])
    m = re.search(r"expected catch (\w+)", detail)
    if m:
        return "not refused as expected (catch %s)" % m.group(1)
    m = re.search(r'\{"(match|length|is_true|is_false|gt|gte|lt|lte|contains|close_to)": '
                  r'\{?"([^"]*)"', detail)
    if m:
        return "%s %s" % (m.group(1), re.sub(r"\.\d+(?=\.|$)", ".N", m.group(2)))
    return re.sub(r"\d+", "N", re.sub(r"^\w+ step \d+ ", "", detail))[:90]


def table(results, out=print, top=40):
    """Files, tests, passed, failed, skipped, pass % (of the tests that ran)
    and failures by cause, from --json results."""
    n = {"passed": 0, "failed": 0, "skipped": 0}
    for r in results:
        n[r["status"]] += 1
    files = len({r["id"].split("::")[0] for r in results})
    ran = n["passed"] + n["failed"]
    out("%-6s %-6s %-7s %-7s %-8s %s" % ("files", "tests", "passed", "failed", "skipped",
                                         "pass %"))
    out("%-6d %-6d %-7d %-7d %-8d %.1f" % (files, len(results), n["passed"], n["failed"],
                                           n["skipped"], 100.0 * n["passed"] / ran if ran else 0))
    causes = {}
    for r in results:
        if r["status"] == "failed":
            causes.setdefault(cause_of(r["detail"]), []).append(r["id"])
    out("\nfailures by cause (tests, cause, first test):")
    for cause, ids in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:top]:
        out("%5d  %s\n       %s" % (len(ids), cause, ids[0]))
    if len(causes) > top:
        out("  ... %d more causes, %d tests" %
            (len(causes) - top, sum(len(v) for v in sorted(causes.values(), key=len)[:-top])))
    skips = {}
    for r in results:
        if r["status"] == "skipped":
            k = re.sub(r":.*", "", r["detail"])[:80]
            skips[k] = skips.get(k, 0) + 1
    out("\nskipped by reason:")
    for k, v in sorted(skips.items(), key=lambda kv: -kv[1])[:15]:
        out("%5d  %s" % (v, k))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="YAML test files (or folders of them)")
    ap.add_argument("--url", default="http://localhost:9200")
    ap.add_argument("--report", action="store_true",
                    help="report only: exit 0 whatever fails")
    ap.add_argument("--known-failures", help="file of failures that do not fail the run")
    ap.add_argument("--mode", help="solo or cluster: which known_failures entries apply")
    ap.add_argument("--filter", help="regex on FILE::TEST ids to run")
    ap.add_argument("--json", help="write every result to this file")
    ap.add_argument("--no-wipe-first", action="store_true",
                    help="do not wipe the node before the first test")
    ap.add_argument("--table", metavar="JSON",
                    help="print the totals and failures by cause of a --json file, run nothing")
    args = ap.parse_args(argv)
    if args.table:
        with open(args.table) as fh:
            table(json.load(fh))
        return 0
    if not args.files:
        ap.error("no test files")
    files = []
    for f in args.files:
        if os.path.isdir(f):
            files += sorted(os.path.join(d, x) for d, _, names in os.walk(f) for x in names
                            if x.endswith((".yml", ".yaml")))
        else:
            files.append(f)
    client = Client(args.url)
    if not args.no_wipe_first:
        wipe(client)
    results = []
    for f in files:
        results += run_file(client, f, args.filter)
    known = load_known(args.known_failures)
    unexpected, _ = summarize(results, known, args.mode)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    if args.report:
        return 0
    if args.known_failures:
        return 1 if unexpected else 0
    return 1 if any(r["status"] == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
