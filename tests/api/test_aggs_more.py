"""Aggregations the dashboards draw (issue 13): meta, pipeline aggregations
(derivative, cumulative_sum, moving_fn, serial_diff, bucket_script,
bucket_selector, bucket_sort and the *_bucket siblings) and composite
paging, on a solo node and a 3-node static cluster (3 shards, so partial
states merge). Every answer is compared with values computed here from
the indexed documents."""
import math
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import ClusterNode, Node, cluster_file, eq, error_is, run_tests, test  # noqa: E402

TMP = tempfile.mkdtemp(prefix="shoal-aggs-more-test-")
NAMES = ["node-1", "node-2", "node-3"]
SOLO = None
CLUSTER = {}
INDEX = "am"
DAY = 86400000
T0 = 1577836800000  # 2020-01-01T00:00:00Z
NDAYS = 24
KEYS = ["alpha", "beta", "gamma", "delta"]


def make_docs():
    r = random.Random(13)
    docs = []
    for i in range(260):
        day = r.randrange(NDAYS)
        if day in (5, 6, 13):  # days without documents: gaps in the histogram
            day += 1
        d = {"t": T0 + day * DAY + r.randrange(DAY), "v": r.randrange(-20, 100),
             "k": r.choice(KEYS)}
        if r.random() < 0.7:
            d["c"] = r.choice(["red", "green", "blue"])
        if r.random() < 0.8:
            d["w"] = r.randrange(1, 5)
        docs.append(d)
    return docs


DOCS = make_docs()


def solo():
    global SOLO
    if SOLO is None:
        SOLO = Node()
        load(SOLO)
    return SOLO


def cluster():
    if not CLUSTER:
        cfile = os.path.join(TMP, "cluster.json")
        ports = cluster_file(cfile, [(n, None) for n in NAMES])
        for n in NAMES:
            d = os.path.join(TMP, n)
            os.makedirs(d, exist_ok=True)
            CLUSTER[n] = ClusterNode(cfile, n, ports[n][0], data=d)
        for n in NAMES:
            st, b = CLUSTER[n].req("GET", "/_cluster/health?wait_for_nodes=3&timeout=60s",
                                   timeout=80)
            eq((st, b.get("number_of_nodes")), (200, 3), "3 nodes seen by " + n)
        load(CLUSTER["node-1"])
    return CLUSTER


def load(n):
    st, b = n.req("PUT", "/" + INDEX, {
        "settings": {"number_of_shards": 3, "number_of_replicas": 0},
        "mappings": {"properties": {"t": {"type": "date"}, "v": {"type": "long"},
                                    "k": {"type": "keyword"}, "c": {"type": "keyword"},
                                    "w": {"type": "integer"}}}})
    eq(st, 200, "create: %s" % b)
    lines = []
    for i, d in enumerate(DOCS):
        lines += [{"index": {"_index": INDEX, "_id": str(i + 1)}}, d]
    st, b = n.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk: %s" % b)


def targets():
    c = cluster()
    return [("solo", [solo()]), ("cluster", list(c.values()))]


def aggs(n, body):
    st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "aggs": body})
    eq(st, 200, "search %s: %s" % (body, b))
    return b["aggregations"]


def close(a, b, what):
    if a is None or b is None:
        eq(a, b, what)
        return
    if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9):
        raise AssertionError("%s: expected %r, got %r" % (what, b, a))


def closes(a, b, what):
    eq(len(a), len(b), what + " (length)")
    for i, (x, y) in enumerate(zip(a, b)):
        close(x, y, "%s[%d]" % (what, i))


# ---- the model ----

def day_buckets():
    """date_histogram per day (gaps filled): [(key, doc_count, sum of v)]."""
    days = sorted({(d["t"] - T0) // DAY for d in DOCS})
    out = []
    for day in range(days[0], days[-1] + 1):
        vs = [d["v"] for d in DOCS if (d["t"] - T0) // DAY == day]
        out.append((T0 + day * DAY, len(vs), float(sum(vs))))
    return out


def gap_value(b):
    """A bucket's sum as buckets_path sees it: a gap (None) when empty."""
    return None if b[1] == 0 else b[2]


HIST = {"date_histogram": {"field": "t", "calendar_interval": "day"}}


def hist_with(pipes):
    body = dict(HIST)
    body["aggs"] = dict({"s": {"sum": {"field": "v"}}}, **pipes)
    return {"h": body}


# ---- meta ----

@test
def meta_is_echoed():
    for label, nodes in targets():
        for n in nodes:
            a = aggs(n, {"by_k": {"meta": {"color": "blue", "n": 1},
                                  "terms": {"field": "k"},
                                  "aggs": {"m": {"meta": {"x": [1, 2]}, "max": {"field": "v"}},
                                           "e": {"meta": {}, "filter": {"match_all": {}}}}},
                         "avg_k": {"meta": {"p": "q"}, "avg_bucket": {"buckets_path": "by_k>m"}}})
            eq(a["by_k"]["meta"], {"color": "blue", "n": 1}, label)
            eq(list(a["by_k"])[0], "meta", label + " meta first")
            b0 = a["by_k"]["buckets"][0]
            eq(b0["m"]["meta"], {"x": [1, 2]}, label)
            eq(b0["e"]["meta"], {}, label)
            eq(a["avg_k"]["meta"], {"p": "q"}, label)
            want = sum(max(d["v"] for d in DOCS if d["k"] == k) for k in KEYS) / len(KEYS)
            close(a["avg_k"]["value"], want, label + " avg_bucket")
            st, b = n.req("POST", "/%s/_search" % INDEX,
                          {"size": 0, "aggs": {"x": {"meta": 3, "max": {"field": "v"}}}})
            error_is((st, b), 400, "parsing_exception", "meta")


# ---- parent pipelines ----

@test
def derivative_and_cumulative_sum():
    hb = day_buckets()
    for label, nodes in targets():
        for n in nodes:
            a = aggs(n, hist_with({
                "d": {"derivative": {"buckets_path": "s", "unit": "1h"}},
                "dz": {"derivative": {"buckets_path": "s", "gap_policy": "insert_zeros"}},
                "dc": {"derivative": {"buckets_path": "_count"}},
                "cs": {"cumulative_sum": {"buckets_path": "s", "format": "#,##0.0"}},
                "dd": {"derivative": {"buckets_path": "d"}}}))["h"]["buckets"]
            eq([b["key"] for b in a], [b[0] for b in hb], label + " keys")
            eq("d" in a[0], False, label + " no derivative in the first bucket")
            run = 0.0
            for i, b in enumerate(a):
                run += hb[i][2]
                close(b["cs"]["value"], run, label + " cumulative_sum")
                eq(b["cs"]["value_as_string"], "{:,.1f}".format(run), label + " format")
                if i == 0:
                    continue
                prev, cur = gap_value(hb[i - 1]), gap_value(hb[i])
                want = None if prev is None or cur is None else cur - prev
                close(b["d"]["value"], want, label + " derivative %d" % i)
                close(b["d"]["normalized_value"], None if want is None else want / 24,
                      label + " normalized_value")
                close(b["dz"]["value"], (cur or 0) - (prev or 0), label + " insert_zeros")
                close(b["dc"]["value"], hb[i][1] - hb[i - 1][1], label + " of _count")
            # a derivative of a derivative reads the first one's values
            for i in range(2, len(a)):
                x, y = a[i - 1]["d"]["value"], a[i]["d"]["value"]
                close(a[i]["dd"]["value"], None if x is None or y is None else y - x,
                      label + " second derivative")


def mf_model(values, window, shift, fn):
    out = []
    for i in range(len(values)):
        lo = min(max(i - window + shift, 0), len(values))
        hi = min(max(i + shift, 0), len(values))
        out.append(fn(values[lo:hi]))
    return out


def ewma(vs, alpha):
    avg = None
    for v in vs:
        avg = v if avg is None else v * alpha + avg * (1 - alpha)
    return avg


def lwa(vs):
    if not vs:
        return None
    tot, w = 1, 0.0
    for i, v in enumerate(vs):
        w += v * (i + 1)
        tot += i + 1
    return w / tot


@test
def moving_fn_and_serial_diff():
    hb = day_buckets()
    vals = [gap_value(b) for b in hb]
    present = [v for v in vals if v is not None]
    cases = {
        "mx": ("MovingFunctions.max(values)", 3, 0,
               lambda w: max(w) if w else None),
        "avg": ("MovingFunctions.unweightedAvg(values)", 4, 1,
                lambda w: sum(w) / len(w) if w else None),
        "sm": ("MovingFunctions.sum(values)", 2, 0, lambda w: float(sum(w))),
        "ew": ("MovingFunctions.ewma(values, 0.3)", 5, 0, lambda w: ewma(w, 0.3)),
        "lw": ("MovingFunctions.linearWeightedAvg(values)", 3, 0, lwa),
        "sd": ("MovingFunctions.stdDev(values, MovingFunctions.unweightedAvg(values))", 3, 0,
               lambda w: math.sqrt(sum((x - sum(w) / len(w)) ** 2 for x in w) / len(w))
               if w else None),
    }
    pipes = {name: {"moving_fn": {"buckets_path": "s", "window": w, "shift": sh,
                                  "script": src}}
             for name, (src, w, sh, _) in cases.items()}
    pipes["sd2"] = {"serial_diff": {"buckets_path": "s", "lag": 2}}
    for label, nodes in targets():
        for n in nodes:
            a = aggs(n, hist_with(pipes))["h"]["buckets"]
            for name, (src, w, sh, fn) in cases.items():
                want = mf_model(present, w, sh, fn)
                got = [b[name]["value"] for b in a if name in b]
                closes(got, want, "%s %s" % (label, name))
                eq([name in b for b in a], [v is not None for v in vals], label + " skipped gaps")
            for i, b in enumerate(a):
                ok = i >= 2 and vals[i] is not None and vals[i - 2] is not None
                eq("sd2" in b, ok, label + " serial_diff presence %d" % i)
                if ok:
                    close(b["sd2"]["value"], vals[i] - vals[i - 2], label + " serial_diff")


@test
def bucket_script_selector_sort():
    per_k = {k: [d["v"] for d in DOCS if d["k"] == k] for k in KEYS}
    hb = day_buckets()
    for label, nodes in targets():
        for n in nodes:
            a = aggs(n, {"by_k": {"terms": {"field": "k"}, "aggs": {
                "s": {"sum": {"field": "v"}},
                "ratio": {"bucket_script": {"buckets_path": {"x": "s", "n": "_count"},
                                            "script": "params.x / params.n",
                                            "format": "0.00"}},
                "srt": {"bucket_sort": {"sort": [{"s": {"order": "desc"}}], "from": 1,
                                        "size": 2}}}}})["by_k"]["buckets"]
            order = sorted(KEYS, key=lambda k: (-len(per_k[k]), k))
            order = sorted(order, key=lambda k: -sum(per_k[k]))[1:3]
            eq([b["key"] for b in a], order, label + " bucket_sort")
            for bk in a:
                vs = per_k[bk["key"]]
                eq(bk["ratio"]["value_as_string"], "%.2f" % (sum(vs) / len(vs)), label + " format")
            st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "aggs": {"by_k": {
                "terms": {"field": "k"}, "aggs": {
                    "s": {"sum": {"field": "v"}},
                    "ratio": {"bucket_script": {
                        "buckets_path": {"x": "s", "n": "_count"},
                        "script": {"source": "params.x / params.n * params.f",
                                   "params": {"f": 2}}}}}}}})
            eq(st, 200, label + " bucket_script: %s" % b)
            for bk in b["aggregations"]["by_k"]["buckets"]:
                vs = per_k[bk["key"]]
                close(bk["ratio"]["value"], sum(vs) / len(vs) * 2, label + " bucket_script")
            thr = 600
            h = aggs(n, hist_with({"keep": {"bucket_selector": {
                "buckets_path": {"x": "s", "c": "_count"},
                "script": "params.x > %d && params.c >= 5" % thr}}}))["h"]["buckets"]
            want = [b[0] for b in hb if b[2] > thr and b[1] >= 5]
            eq([b["key"] for b in h], want, label + " bucket_selector")
            eq(len(want) > 0 and len(want) < len(hb), True, "the predicate splits the buckets")


# ---- sibling pipelines ----

@test
def sibling_pipelines():
    hb = day_buckets()
    vals = [b[2] for b in hb if b[1] > 0]
    keys = [b[0] for b in hb if b[1] > 0]
    n_ = len(vals)
    mean = sum(vals) / n_
    for label, nodes in targets():
        for n in nodes:
            a = aggs(n, dict(hist_with({}), **{
                "avg": {"avg_bucket": {"buckets_path": "h>s"}},
                "mx": {"max_bucket": {"buckets_path": "h>s"}},
                "mn": {"min_bucket": {"buckets_path": "h>s"}},
                "sm": {"sum_bucket": {"buckets_path": "h>s"}},
                "cnt": {"sum_bucket": {"buckets_path": "h>_count"}},
                "st": {"stats_bucket": {"buckets_path": "h>s"}},
                "es": {"extended_stats_bucket": {"buckets_path": "h>s", "sigma": 3}},
                "pc": {"percentiles_bucket": {"buckets_path": "h>s", "percents": [10, 50, 99]}}}))
            close(a["avg"]["value"], mean, label + " avg_bucket")
            close(a["mx"]["value"], max(vals), label + " max_bucket")
            eq(len(a["mx"]["keys"]), vals.count(max(vals)), label + " max_bucket keys")
            import datetime
            k0 = datetime.datetime.utcfromtimestamp(keys[vals.index(max(vals))] / 1000)
            eq(a["mx"]["keys"][0], k0.strftime("%Y-%m-%dT%H:%M:%S.000Z"), label + " key")
            close(a["mn"]["value"], min(vals), label + " min_bucket")
            close(a["sm"]["value"], sum(vals), label + " sum_bucket")
            close(a["cnt"]["value"], float(len(DOCS)), label + " sum of _count")
            st = a["st"]
            eq(st["count"], n_, label)
            closes([st["min"], st["max"], st["avg"], st["sum"]],
                   [min(vals), max(vals), mean, sum(vals)], label + " stats_bucket")
            es = a["es"]
            var = sum((v - mean) ** 2 for v in vals) / n_
            close(es["variance"], var, label + " variance")
            close(es["std_deviation_bounds"]["upper"], mean + 3 * math.sqrt(var), label)
            close(es["variance_sampling"], var * n_ / (n_ - 1), label + " variance_sampling")
            sv = sorted(vals)
            for p in (10, 50, 99):
                want = sv[int(math.floor(p / 100 * (n_ - 1) + 0.5))]
                close(a["pc"]["values"]["%.1f" % p], want, label + " percentiles_bucket %d" % p)


# ---- composite ----

def composite_model(desc_h=False):
    """All (k, c or None, v//10*10) buckets in composite order."""
    cnt = {}
    for d in DOCS:
        key = (d["k"], d.get("c"), float(d["v"] // 10 * 10))
        cnt[key] = cnt.get(key, 0) + 1

    def sk(key):
        k, c, h = key
        return (k, (0, "") if c is None else (1, c), -h if desc_h else h)
    return [(k, cnt[k]) for k in sorted(cnt, key=sk)]


def composite_pages(n, size, desc_h=False):
    src = [{"k": {"terms": {"field": "k"}}},
           {"c": {"terms": {"field": "c", "missing_bucket": True}}},
           {"h": {"histogram": {"field": "v", "interval": 10,
                                "order": "desc" if desc_h else "asc"}}}]
    got, after, pages = [], None, 0
    while True:
        body = {"sources": src, "size": size}
        if after is not None:
            body["after"] = after
        a = aggs(n, {"comp": {"composite": body, "aggs": {"mx": {"max": {"field": "v"}}}}})["comp"]
        pages += 1
        if not a["buckets"]:
            eq("after_key" in a, False, "no after_key on the empty page")
            break
        eq(a["after_key"], a["buckets"][-1]["key"], "after_key is the last key")
        for b in a["buckets"]:
            k = b["key"]
            got.append(((k["k"], k["c"], k["h"]), b["doc_count"]))
            want_max = max(d["v"] for d in DOCS if d["k"] == k["k"] and d.get("c") == k["c"]
                           and d["v"] // 10 * 10 == k["h"])
            eq(b["mx"]["value"], float(want_max), "sub-aggregation in a composite bucket")
        after = a["after_key"]
        if pages > 500:
            raise AssertionError("composite paging does not end")
    return got, pages


@test
def composite_paging():
    for label, nodes in targets():
        for n in nodes[:2]:
            for desc in (False, True):
                want = composite_model(desc)
                got, pages = composite_pages(n, 7, desc)
                eq(got, want, "%s composite pages (desc=%s)" % (label, desc))
                eq(pages, (len(want) + 6) // 7 + 1, label + " number of pages")


@test
def composite_dates():
    days = {}
    for d in DOCS:
        day = (d["t"] - T0) // DAY
        key = (T0 + day * DAY, d["k"])
        days[key] = days.get(key, 0) + 1
    want = sorted(days.items(), key=lambda kv: (-kv[0][0], kv[0][1]))
    for label, nodes in targets():
        n = nodes[-1]
        src = [{"d": {"date_histogram": {"field": "t", "calendar_interval": "1d",
                                         "order": "desc"}}},
               {"k": {"terms": {"field": "k"}}}]
        a = aggs(n, {"c": {"composite": {"sources": src, "size": 1000}}})["c"]
        eq([((b["key"]["d"], b["key"]["k"]), b["doc_count"]) for b in a["buckets"]], want,
           label + " composite date_histogram")
        src[0]["d"]["date_histogram"]["format"] = "yyyy-MM-dd"
        a = aggs(n, {"c": {"composite": {"sources": src, "size": 3,
                                         "after": {"d": "2020-01-10", "k": "beta"}}}})["c"]
        import datetime
        rest = [kv for kv in want if kv[0][0] < T0 + 9 * DAY or
                (kv[0][0] == T0 + 9 * DAY and kv[0][1] > "beta")][:3]
        eq([(b["key"]["d"], b["key"]["k"]) for b in a["buckets"]],
           [(datetime.datetime.utcfromtimestamp(k[0] / 1000).strftime("%Y-%m-%d"), k[1])
            for k, _ in rest], label + " formatted keys and after")


# ---- metrics and rare_terms ----

@test
def percentile_ranks_weighted_avg_rare_terms():
    cut = T0 + 2 * DAY
    few = sorted(float(d["v"]) for d in DOCS if d["t"] < cut)
    eq(len(few) < 30, True, "few enough values for an exact t-digest")
    probes = [few[0] - 1, few[len(few) // 3] + 0.5, (few[0] + few[-1]) / 2, few[-1] + 3]

    def rank(x):
        # t-digest 3.2's cdf (ES 7.10), one centroid per value: a value's
        # weight spreads from half-way to its left neighbour to half-way to
        # its right one; the walk ends at the next-to-last value
        below, left = 0, (few[1] - few[0]) / 2
        right = left
        for a in range(len(few) - 1):
            if a == len(few) - 2 or x < few[a] + right:
                if x >= few[a] + right:
                    return 100.0
                lo, hi = few[a] - left, few[a] + right
                share = (x - lo) / (hi - lo) if hi > lo else (0 if x < lo else 1)
                return max(0.0, (below + share) / len(few)) * 100
            below += 1
            left, right = right, (few[a + 2] - few[a + 1]) / 2
    num = sum(d["v"] * d.get("w", 2) for d in DOCS)
    den = sum(d.get("w", 2) for d in DOCS)
    counts = {}
    for d in DOCS:
        counts[d["v"]] = counts.get(d["v"], 0) + 1
    rare = sorted(((c, v) for v, c in counts.items() if c <= 2))
    eq(any(c > 2 for c in counts.values()) and len(rare) > 5, True, "rare and frequent values")
    for label, nodes in targets():
        for n in nodes:
            a = aggs(n, {
                "early": {"filter": {"range": {"t": {"lt": cut}}},
                          "aggs": {"pr": {"percentile_ranks": {"field": "v", "values": probes}},
                                   "prl": {"percentile_ranks": {"field": "v", "values": probes[1:2],
                                                                "keyed": False}}}},
                "wa": {"weighted_avg": {"value": {"field": "v"},
                                        "weight": {"field": "w", "missing": 2}}},
                "rt": {"rare_terms": {"field": "v", "max_doc_count": 2}}})
            vals = a["early"]["pr"]["values"]
            for x in probes:
                key = repr(float(x))
                close(vals[key], rank(x), "%s percentile_rank of %s" % (label, x))
            eq(a["early"]["prl"]["values"][0]["key"], float(probes[1]), label + " keyed false")
            close(a["wa"]["value"], num / den, label + " weighted_avg")
            eq([(b["doc_count"], b["key"]) for b in a["rt"]["buckets"]], rare,
               label + " rare_terms")
            st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "aggs": {
                "x": {"weighted_avg": {"value": {"field": "v"}}}}})
            error_is((st, b), 400, "illegal_argument_exception", "Required [weight]")
            st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "aggs": {
                "x": {"rare_terms": {"field": "v", "max_doc_count": 101}}}})
            error_is((st, b), 400, "illegal_argument_exception", "[max_doc_count]")
            st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "aggs": {
                "x": {"percentile_ranks": {"field": "v"}}}})
            error_is((st, b), 400, "illegal_argument_exception", "[values] must not be null")


@test
def global_ignores_the_query():
    alpha = [d for d in DOCS if d["k"] == "alpha"]
    for label, nodes in targets():
        for n in nodes:
            for q in ({"term": {"k": "alpha"}}, {"term": {"k": "none-such"}}):
                st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "query": q, "aggs": {
                    "all": {"global": {}, "aggs": {"s": {"sum": {"field": "v"}},
                                                   "by_k": {"terms": {"field": "k"}}}},
                    "s": {"sum": {"field": "v"}}}})
                eq(st, 200, label + ": %s" % b)
                a = b["aggregations"]
                eq(a["all"]["doc_count"], len(DOCS), label + " global doc_count")
                close(a["all"]["s"]["value"], float(sum(d["v"] for d in DOCS)), label)
                eq(sorted(x["key"] for x in a["all"]["by_k"]["buckets"]), sorted(KEYS), label)
                want = sum(d["v"] for d in alpha) if q["term"]["k"] == "alpha" else 0
                close(a["s"]["value"], float(want), label + " the query still applies")


@test
def adjacency_matrix_pairs():
    preds = {"hi": lambda d: d["v"] >= 50, "alpha": lambda d: d["k"] == "alpha",
             "red": lambda d: d.get("c") == "red", "none": lambda d: False}
    names = sorted(preds)
    want = []
    for i, x in enumerate(names):
        for y in names[i:]:
            hit = [d for d in DOCS if preds[x](d) and preds[y](d)]
            if hit:
                want.append(((x if x == y else x + "|" + y), len(hit), float(sum(d["v"] for d in hit))))
    want.sort()
    for label, nodes in targets():
        for n in nodes:
            a = aggs(n, {"m": {"adjacency_matrix": {"separator": "|", "filters": {
                "red": {"term": {"c": "red"}}, "hi": {"range": {"v": {"gte": 50}}},
                "alpha": {"term": {"k": "alpha"}}, "none": {"term": {"k": "zzz"}}}},
                "aggs": {"s": {"sum": {"field": "v"}}}}})["m"]["buckets"]
            eq([(b["key"], b["doc_count"], b["s"]["value"]) for b in a], want,
               label + " adjacency_matrix")


@test
def significant_terms_jlh():
    sub = [d for d in DOCS if d["v"] >= 60]
    want = []
    for k in KEYS:
        fg = sum(1 for d in sub if d["k"] == k)
        bg = sum(1 for d in DOCS if d["k"] == k)
        a, b = fg / len(sub), bg / len(DOCS)
        if fg >= 3 and a > b:
            want.append((k, fg, bg, (a - b) * (a / b)))
    want.sort(key=lambda x: (-x[3], x[0]))
    eq(len(want) >= 1 and len(want) < len(KEYS), True, "some keys are significant")
    for label, nodes in targets():
        for n in nodes:
            st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0,
                                                          "query": {"range": {"v": {"gte": 60}}},
                                                          "aggs": {"sig": {"significant_terms": {"field": "k"}}}})
            eq(st, 200, label + ": %s" % b)
            sig = b["aggregations"]["sig"]
            eq((sig["doc_count"], sig["bg_count"]), (len(sub), len(DOCS)), label + " sizes")
            got = sig["buckets"]
            eq([(x["key"], x["doc_count"], x["bg_count"]) for x in got],
               [w[:3] for w in want], label + " significant terms")
            for x, w in zip(got, want):
                close(x["score"], w[3], label + " JLH score")
            st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "aggs": {
                "sig": {"significant_terms": {"field": "k", "chi_square": {}}}}})
            error_is((st, b), 400, "illegal_argument_exception", "not supported by Shoal")


def iso(ms):
    import datetime
    d = datetime.datetime.utcfromtimestamp(ms // 1000)
    return d.strftime("%Y-%m-%dT%H:%M:%S") + ".%03dZ" % (ms % 1000)


@test
def top_metrics_by_date():
    top = sorted(DOCS, key=lambda d: -d["t"])[:3]
    for label, nodes in targets():
        for n in nodes:
            a = aggs(n, {
                "tm": {"top_metrics": {"metrics": [{"field": "v"}, {"field": "w"}],
                                       "sort": {"t": "desc"}, "size": 3}},
                "lo": {"top_metrics": {"metrics": {"field": "t"}, "sort": [{"v": {"order": "asc"}}]}},
                "by_k": {"terms": {"field": "k"}, "aggs": {
                    "last": {"top_metrics": {"metrics": {"field": "v"}, "sort": {"t": "desc"}}},
                    "o": {"bucket_sort": {"sort": [{"last": {"order": "asc"}}]}}}}})
            eq(a["tm"]["top"], [{"sort": [iso(d["t"])], "metrics": {"v": d["v"], "w": d.get("w")}}
                                for d in top], label + " top_metrics")
            eq(a["lo"]["top"][0]["sort"], [min(d["v"] for d in DOCS)], label + " asc by v")
            lastv = {}
            for k in KEYS:
                lastv[k] = max((d for d in DOCS if d["k"] == k), key=lambda d: d["t"])["v"]
            got = [(b["key"], b["last"]["top"][0]["metrics"]["v"]) for b in a["by_k"]["buckets"]]
            eq(sorted(got, key=lambda kv: kv[1]), got, label + " bucket_sort by top_metrics")
            eq(dict(got), lastv, label + " top_metrics per bucket")
            st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "aggs": {
                "x": {"top_metrics": {"metrics": {"field": "v"}, "sort": {"t": "desc"},
                                      "size": 11}}}})
            error_is((st, b), 400, "illegal_argument_exception", "[top_metrics.size]")


# ---- errors ----

@test
def errors_are_es_shaped():
    n = solo()
    cases = [
        ({"x": {"no_such_agg": {}}}, "parsing_exception", "Unknown aggregation type [no_such_agg]"),
        (hist_with({"d": {"derivative": {"buckets_path": "nope"}}}), "illegal_argument_exception",
         "No aggregation found for path [nope]"),
        ({"a": {"avg_bucket": {"buckets_path": "h>s"}}}, "illegal_argument_exception",
         "No aggregation found for path [h>s]"),
        ({"t": {"terms": {"field": "k"}, "aggs": {"d": {"derivative": {"buckets_path": "_count"}}}}},
         "action_request_validation_exception",
         "derivative aggregation [d] must have a histogram, date_histogram or "
         "auto_date_histogram as parent"),
        ({"d": {"cumulative_sum": {"buckets_path": "_count"}}}, "action_request_validation_exception",
         "must be declared inside of another aggregation"),
        (hist_with({"m": {"moving_fn": {"buckets_path": "s", "window": 2,
                                        "script": "params.x + 1"}}}), "script_exception",
         "is not supported"),
        (hist_with({"m": {"moving_fn": {"buckets_path": "s", "window": 0,
                                        "script": "MovingFunctions.max(values)"}}}),
         "illegal_argument_exception", "[window] must be a positive"),
        (hist_with({"m": {"derivative": {"buckets_path": "s", "bogus": 1}}}), "parsing_exception",
         "[derivative] unknown field [bogus]"),
        (hist_with({"m": {"derivative": {"buckets_path": "s", "gap_policy": "zero"}}}),
         "parsing_exception", "Invalid gap policy"),
        (hist_with({"m": {"bucket_selector": {"buckets_path": {"x": "s"},
                                              "script": "params.x + 1"}}}),
         "script_exception", "must return a boolean"),
        ({"t": {"terms": {"field": "k"}, "aggs": {"c": {"composite": {
            "sources": [{"k": {"terms": {"field": "k"}}}]}}}}}, "illegal_argument_exception",
         "[composite] aggregation cannot be used with a parent aggregation"),
        ({"c": {"composite": {"sources": []}}}, "illegal_argument_exception",
         "Composite [sources] cannot be null or empty"),
        ({"c": {"composite": {"sources": [{"k": {"terms": {"field": "k"}}}],
                              "after": {"x": "a"}}}}, "illegal_argument_exception",
         "Missing value for [after.k]"),
        ({"c": {"composite": {"sources": [{"k": {"terms": {"field": "k"}}}], "bogus": 1}}},
         "parsing_exception", "unknown field [bogus]"),
        ({"a": {"max_bucket": {"buckets_path": "mx"}}, "mx": {"max": {"field": "v"}}},
         "action_request_validation_exception", "must be a multi-bucket aggregation"),
        ({"g": {"ip_range": {"field": "k", "ranges": []}}}, "illegal_argument_exception",
         "not supported by Shoal"),
    ]
    for body, etype, part in cases:
        st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "aggs": body})
        error_is((st, b), 400, etype, part)
    # ES's AggregationExecutionException is a 500, raised on every shard
    st, b = n.req("POST", "/%s/_search" % INDEX, {"size": 0, "aggs": {
        "t": {"terms": {"field": "k"}, "aggs": {"g": {"global": {}}}}}})
    eq((st, b["error"]["type"], b["error"]["root_cause"][0]["type"]),
       (500, "search_phase_execution_exception", "aggregation_execution_exception"),
       "global under terms: %s" % b)
    eq("Global aggregations can only be defined as top" in b["error"]["root_cause"][0]["reason"],
       True, "global under terms, reason")


def teardown():
    rc = 0
    if SOLO:
        rc = SOLO.stop() or rc
    for n in CLUSTER.values():
        rc = n.stop() or rc
    shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    run_tests(budget_s=60, teardown=teardown)
