"""Suggesters on a solo node and a 3-node static cluster: the term
suggester (Lucene's DirectSpellChecker: candidates within max_edits of
each analysed token, score 1 - edits / min(length), doc freqs summed over
shards, sort, suggest_mode, size, string_distance, prefix_length,
min_word_length, min_doc_freq, max_term_freq) and the phrase suggester
(ES's noisy channel model: direct generators, stupid backoff / laplace
smoothing over unigrams, bigrams from a shingle sub-field, confidence,
max_errors, highlight), checked against a small Python model of both;
typed_keys; suggest alongside a query and with size 0; the 400s."""
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal import SoloAndCluster, eq, error_is, run_tests, test  # noqa: E402

FIX = SoloAndCluster("shoal-suggest-test-")
solo, cluster, teardown = FIX.solo, FIX.cluster, FIX.teardown

VOCAB = ["quick", "quack", "quiet", "quilt", "brown", "brawn", "crown", "frown",
         "drown", "grown", "lazy", "dog", "dogs", "doge", "jumps", "jumped", "bumps",
         "dumps", "humps", "the", "fox", "box", "foxes", "boxes"]


def make_docs(seed, count):
    rnd = random.Random(seed)
    docs = []
    for _ in range(count):
        docs.append(" ".join(rnd.choice(VOCAB) for _ in range(rnd.randint(2, 7))))
    return docs


DOCS = make_docs(7, 60)
_made = set()


def targets():
    c = cluster()
    return [("solo", solo(), [solo()]), ("cluster", c["node-1"], list(c.values()))]


def make_index(node, name, docs, shards, mappings=None, settings=None):
    key = (id(node), name)
    if key in _made:
        return
    s = {"number_of_shards": shards, "number_of_replicas": 0}
    s.update(settings or {})
    st, b = node.req("PUT", "/" + name, {
        "settings": s, "mappings": mappings or {"properties": {"t": {"type": "text"}}}})
    eq(st, 200, "create %s: %s" % (name, b))
    lines = []
    for i, d in enumerate(docs):
        lines += [{"index": {"_index": name, "_id": str(i)}}, {"t": d}]
    st, b = node.bulk(lines, params="?refresh=true")
    eq((st, b.get("errors")), (200, False), "bulk %s: %s" % (name, b))
    _made.add(key)


def suggest(node, index, body, params=""):
    st, b = node.req("POST", "/%s/_search%s" % (index, params), body)
    eq(st, 200, "suggest %s: %s" % (body, b))
    return b


# ---- the model ----

def osa(a, b):
    """Optimal string alignment distance (Lucene's automata with transpositions)."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            c = 0 if a[i - 1] == b[j - 1] else 1
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + c)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def lev(a, b):
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
        prev = cur
    return prev[len(b)]


def f32(x):
    import struct
    return struct.unpack("f", struct.pack("f", x))[0]


def tokens(text):
    out, cur, start = [], "", 0
    for i, ch in enumerate(text + " "):
        if ch.isalnum():
            if not cur:
                start = i
            cur += ch
        elif cur:
            out.append((cur.lower(), start, len(cur)))
            cur = ""
    return out


def stats(docs):
    """doc freq and total term freq per term, and the total token count."""
    df, ttf = {}, {}
    for d in docs:
        ts = [t for t, _, _ in tokens(d)]
        for t in ts:
            ttf[t] = ttf.get(t, 0) + 1
        for t in set(ts):
            df[t] = df.get(t, 0) + 1
    return df, ttf


def spell(term, df, max_doc, mode="missing", max_edits=2, prefix_length=1, min_word_length=4,
          accuracy=0.5, min_doc_freq=0.0, max_term_freq=0.01, num=5, inspections=5,
          distance="internal", sort="score", threshold=None):
    """DirectSpellChecker.suggestSimilar over one shard's dictionary."""
    if len(term) < min_word_length:
        return []
    tdf = df.get(term, 0)
    if mode == "missing" and tdf > 0:
        return []
    if max_term_freq >= 1 and tdf > max_term_freq:
        return []
    elif tdf > math.ceil(f32(max_term_freq * max_doc)):
        return []
    mindf = tdf if mode == "popular" else 0
    thr = min_doc_freq if threshold is None else threshold
    if thr >= 1:
        mindf = max(mindf, int(thr))
    elif thr > 0:
        mindf = max(mindf, int(thr * max_doc) - 1)
    keep = num * inspections

    def one_pass(edits):
        p = max(prefix_length, edits - 1)
        got = []
        for t, f in df.items():
            if t[:p] != term[:p] or abs(len(t) - len(term)) > edits:
                continue
            ed = osa(term[p:], t[p:])
            if ed > edits or t == term or f <= mindf:
                continue
            s = f32(1 - ed / min(len(t), len(term)))
            if distance == "levenshtein":
                s = f32(1 - lev(term, t) / max(len(t), len(term)))
            elif distance == "damerau_levenshtein":
                s = f32(1 - osa(term, t) / min(len(t), len(term)))
            if s < accuracy:
                continue
            got.append((t, s, f))
        got.sort(key=lambda x: (-x[1], x[0]))
        return got[:keep]

    res = one_pass(1)
    if max_edits > 1 and len(res) < keep:
        seen = {t for t, _, _ in res}
        res += [x for x in one_pass(max_edits) if x[0] not in seen]
    if sort == "frequency":
        res.sort(key=lambda x: (-x[2], -x[1], x[0]))
    else:
        res.sort(key=lambda x: (-x[1], -x[2], x[0]))
    return res[:num]


def expect_term(text, docs, size=5, **kw):
    """The term suggestion entries a single-dictionary model expects."""
    df, _ = stats(docs)
    out = []
    for t, off, ln in tokens(text):
        opts = spell(t, df, len(docs), num=max(size, 5), **kw)[:size]
        out.append({"text": t, "offset": off, "length": ln,
                    "options": [{"text": o, "score": s, "freq": f} for o, s, f in opts]})
    return out


def same_entries(got, want, what):
    eq(len(got), len(want), what + ": entries")
    for g, w in zip(got, want):
        eq((g["text"], g["offset"], g["length"]), (w["text"], w["offset"], w["length"]),
           what + ": entry")
        eq([o["text"] for o in g["options"]], [o["text"] for o in w["options"]],
           what + ": options of " + w["text"])
        for go, wo in zip(g["options"], w["options"]):
            for k in wo:
                if k == "score":
                    if abs(go[k] - wo[k]) > 1e-6 * max(1, abs(wo[k])):
                        raise AssertionError("%s: %s score %r, want %r" % (what, wo["text"],
                                                                           go[k], wo[k]))
                else:
                    eq(go.get(k), wo[k], "%s: %s %s" % (what, wo["text"], k))


# ---- term suggester ----

@test
def term_suggester_sums_freqs_over_shards():
    text = "Qiuck brwn fxo jmups"
    for label, w, nodes in targets():
        make_index(w, "ts", DOCS, 3)
        want = expect_term(text, DOCS)
        assert any(e["options"] for e in want), "the model expects some options"
        for n in nodes:
            b = suggest(n, "ts", {"size": 0, "suggest": {"s1": {"text": text,
                                                                "term": {"field": "t"}}}})
            eq(b["hits"]["hits"], [], label + ": size 0")
            same_entries(b["suggest"]["s1"], want, label + " defaults")
        if label == "cluster":  # every fan-out merges the same (per_node: node partials)
            for fm in ("serial", "per_shard", "per_node"):
                b = suggest(nodes[1], "ts", {"size": 0, "suggest": {
                    "s1": {"text": text, "term": {"field": "t"}}}}, params="?fanout=" + fm)
                same_entries(b["suggest"]["s1"], want, "fanout " + fm)
        # global text, a query beside it, several suggestions, typed_keys
        b = suggest(nodes[-1], "ts", {
            "query": {"match": {"t": "fox"}},
            "suggest": {"text": "dgo bumsp",
                        "a": {"term": {"field": "t", "size": 2, "sort": "frequency"}},
                        "b": {"text": "quikc", "term": {"field": "t", "max_edits": 1}}}},
            params="?typed_keys=true")
        df, _ = stats(DOCS)
        eq(b["hits"]["total"]["value"], df["fox"], label + ": the query still runs")
        eq(sorted(b["suggest"]), ["term#a", "term#b"], label + ": typed keys")
        same_entries(b["suggest"]["term#a"], expect_term("dgo bumsp", DOCS, size=2,
                                                         sort="frequency"),
                     label + " frequency")
        same_entries(b["suggest"]["term#b"], expect_term("quikc", DOCS, max_edits=1),
                     label + " max_edits 1")


@test
def term_suggester_options():
    cases = [
        ("qiuck bruwn", {"prefix_length": 0}, {"prefix_length": 0}),
        ("qiuck bruwn", {"prefix_length": 2}, {"prefix_length": 2}),
        ("dgo fxo", {"min_word_length": 3}, {"min_word_length": 3}),
        ("brwon jumsp", {"string_distance": "levenshtein"}, {"distance": "levenshtein"}),
        ("brwon jumsp", {"string_distance": "damerau_levenshtein"},
         {"distance": "damerau_levenshtein"}),
        ("brwon", {"size": 1}, {"size": 1}),
        ("brwon", {"accuracy": 0.7}, {"accuracy": 0.7}),
        ("brown", {}, {}),  # present in every shard: missing mode suggests nothing
    ]
    for label, w, nodes in targets():
        make_index(w, "ts", DOCS, 3)
        for text, opts, model in cases:
            body = {"field": "t"}
            body.update(opts)
            b = suggest(nodes[0], "ts", {"size": 0, "suggest": {"s": {"text": text,
                                                                       "term": body}}})
            same_entries(b["suggest"]["s"], expect_term(text, DOCS, **model),
                         "%s %s" % (label, opts))


ONE = ["quick brown fox", "quick brown dogs", "quick fox", "quack", "brown cow",
       "quick quick quick", "brawn brawn", "crown", "frown frown frown", "lazy dog"]


@test
def term_suggester_popular_always_and_freq_limits():
    # one shard, so the per-shard rules (max_term_freq of the shard's
    # max_doc, the input's own freq) are those of the model
    df, _ = stats(ONE)
    for label, w, nodes in targets():
        make_index(w, "one", ONE, 1)
        for opts, model in [
                ({"suggest_mode": "popular", "max_term_freq": 100},
                 {"mode": "popular", "max_term_freq": 100}),
                ({"suggest_mode": "always", "max_term_freq": 100},
                 {"mode": "always", "max_term_freq": 100}),
                ({"suggest_mode": "always"}, {"mode": "always"}),
                ({"suggest_mode": "always", "max_term_freq": 100, "min_doc_freq": 2},
                 {"mode": "always", "max_term_freq": 100, "min_doc_freq": 2}),
                ({"suggest_mode": "always", "max_term_freq": 100, "min_doc_freq": 0.3},
                 {"mode": "always", "max_term_freq": 100, "min_doc_freq": 0.3})]:
            body = {"field": "t"}
            body.update(opts)
            for text in ("brawn", "crown quack"):
                b = suggest(nodes[-1], "one", {"size": 0, "suggest": {"s": {
                    "text": text, "term": body}}})
                same_entries(b["suggest"]["s"], expect_term(text, ONE, **model),
                             "%s %s %s" % (label, text, opts))
        # hand-checked: brawn (df 1) in popular mode: brown (df 3, 1 edit: 0.8)
        # and crown/frown/grown (2 edits: 0.6) with df above 1
        b = suggest(nodes[0], "one", {"size": 0, "suggest": {"s": {
            "text": "brawn", "term": {"field": "t", "suggest_mode": "popular",
                                      "max_term_freq": 100}}}})
        eq([(o["text"], o["score"], o["freq"]) for o in b["suggest"]["s"][0]["options"]],
           [("brown", 0.8, 3)], label + ": popular by hand")
        assert df["brown"] == 3


# ---- phrase suggester ----

def phrase_model(text, docs, size=5, confidence=1.0, max_errors=1.0, rwel=0.95,
                 smoothing=("stupid_backoff", 0.4), gram=1, shingle_docs=None,
                 pre=None, post=None):
    """ES's NoisyChannelSpellChecker over one shard with one segment."""
    df, ttf = stats(docs)
    V = sum(ttf.values())
    # the suggest field: the unigram field itself, or its shingle sub-field
    if shingle_docs is None:
        sttf, SV, SN = ttf, V, len(ttf)
    else:
        sttf = dict(ttf)
        for d in docs:
            ts = [t for t, _, _ in tokens(d)]
            for a, b2 in zip(ts, ts[1:]):
                sttf[a + " " + b2] = sttf.get(a + " " + b2, 0) + 1
        SV, SN = sum(sttf.values()), len(sttf)
    shard_size = max(size, 5)
    sets = []
    toks = [t for t, _, _ in tokens(text)]
    for t in toks:
        f = ttf.get(t, 0)
        orig = (t, f, 1.0, (f + 1) / (V + 1), True)
        cands = []
        for c, s, _ in spell(t, df, len(docs), num=5, threshold=0 if f == 0 else None):
            cf = ttf.get(c, 0)
            cands.append((c, cf, s, s * (cf + 1) / (V + 1), False))
        cands.sort(key=lambda x: (x[3], x[0]), reverse=True)
        sets.append((orig, cands[:shard_size]))

    def uni(w):
        if smoothing[0] == "laplace":
            a = smoothing[1]
            return (a + sttf.get(w[0], 0)) / (SV + a * SN)
        return (1.0 + sttf.get(w[0], 0)) / (SV + SN)

    def big(w, w1):
        c = sttf.get(w1[0] + " " + w[0], 0)
        if smoothing[0] == "laplace":
            a = smoothing[1]
            return (a + c) / (w1[1] + a * SN)
        if smoothing[0] == "linear":
            _, bl, ul = smoothing[1]
            if c < 1:
                return ul * uni(w)
            return bl * (c / (0.5 + w1[1])) + ul * uni(w)
        if c < 1:
            return smoothing[1] * uni(w)
        return c / (w1[1] + 0.00000000001)

    def word(path, at):
        w = path[at]
        ch = rwel if w[2] == 1.0 else w[2]
        p = uni(w) if at == 0 or gram == 1 else big(w, path[at - 1])
        return math.log10(ch * p)

    def total(path):
        return math.exp(sum(word(path, i) for i in range(len(path))))

    cutoff = 4.9e-324
    if confidence > 0:
        cutoff = total([o for o, _ in sets]) * confidence
    miss = int(max_errors) if max_errors >= 1 else round(max_errors * len(sets))
    miss = max(1, miss)
    found = []

    def walk(i, path, left):
        if i == len(sets):
            s = total(path)
            if s > cutoff:
                found.append((s, list(path)))
            return
        o, cs = sets[i]
        walk(i + 1, path + [o], left)
        if left > 0:
            for c in cs:
                walk(i + 1, path + [c], left - 1)

    walk(0, [], miss)
    found.sort(key=lambda x: -x[0])
    found = found[:shard_size][:size]
    out = []
    for s, path in found:
        opt = {"text": " ".join(w[0] for w in path), "score": f32(s)}
        if pre:
            parts = []
            for i, w in enumerate(path):
                x = w[0]
                if not w[4]:
                    if i == 0 or path[i - 1][4]:
                        x = pre + x
                    if i + 1 == len(path) or path[i + 1][4]:
                        x = x + post
                parts.append(x)
            opt["highlighted"] = " ".join(parts)
        out.append(opt)
    return [{"text": text, "offset": 0, "length": len(text), "options": out}]


PHRASE_DOCS = ["the quick brown fox", "the quick brown dogs", "quick brown fox jumps",
               "lazy brown dogs", "the lazy dog jumps", "brown crown", "frown town",
               "quack quack", "quick fox", "the brown fox"]


@test
def phrase_suggester_unigram_model():
    for label, w, nodes in targets():
        make_index(w, "ph", PHRASE_DOCS, 1)
        for text, opts, model in [
                ("quikc brwn fxo", {}, {}),
                ("the quikc brwn fox", {"size": 3, "max_errors": 2},
                 {"size": 3, "max_errors": 2}),
                ("quikc brwn", {"confidence": 0.0, "max_errors": 2,
                                "highlight": {"pre_tag": "<em>", "post_tag": "</em>"}},
                 {"confidence": 0.0, "max_errors": 2, "pre": "<em>", "post": "</em>"}),
                ("quikc brwn", {"real_word_error_likelihood": 0.5, "max_errors": 0.5},
                 {"rwel": 0.5, "max_errors": 0.5}),
                ("quikc brwn", {"smoothing": {"laplace": {"alpha": 0.7}}},
                 {"smoothing": ("laplace", 0.7)}),
                ("quikc brwn", {"direct_generator": [{"field": "t",
                                                      "suggest_mode": "missing"}]}, {})]:
            body = {"field": "t"}
            body.update(opts)
            b = suggest(nodes[-1], "ph", {"size": 0, "suggest": {"p": {"text": text,
                                                                        "phrase": body}}},
                        params="?typed_keys=true")
            want = phrase_model(text, PHRASE_DOCS, **model)
            assert want[0]["options"], "model has options for %r" % text
            same_entries(b["suggest"]["phrase#p"], want, "%s %r %s" % (label, text, opts))


SHINGLE_MAPPING = {"properties": {"t": {"type": "text", "fields": {
    "sh": {"type": "text", "analyzer": "shingler"}}}}}
SHINGLE_SETTINGS = {"analysis": {
    "filter": {"sh2": {"type": "shingle", "min_shingle_size": 2, "max_shingle_size": 2}},
    "analyzer": {"shingler": {"type": "custom", "tokenizer": "standard",
                              "filter": ["lowercase", "sh2"]}}}}


@test
def phrase_suggester_bigrams_from_shingles():
    for label, w, nodes in targets():
        make_index(w, "phs", PHRASE_DOCS, 1, SHINGLE_MAPPING, SHINGLE_SETTINGS)
        for text, opts, sm in [
                ("quikc brwn fox", {}, ("stupid_backoff", 0.4)),
                ("lazi dogs jumps", {}, ("stupid_backoff", 0.4)),
                ("quikc brwn fox", {"smoothing": {"stupid_backoff": {"discount": 0.2}}},
                 ("stupid_backoff", 0.2)),
                ("quikc brwn fox", {"smoothing": {"laplace": {"alpha": 0.3}}},
                 ("laplace", 0.3)),
                ("quikc brwn fox", {"smoothing": {"linear_interpolation": {
                    "trigram_lambda": 0.1, "bigram_lambda": 0.6, "unigram_lambda": 0.3}}},
                 ("linear", (0.1, 0.6, 0.3)))]:
            body = {"field": "t.sh", "direct_generator": [{"field": "t"}]}
            body.update(opts)
            b = suggest(nodes[0], "phs", {"size": 0, "suggest": {"p": {
                "text": text, "phrase": body}}})
            want = phrase_model(text, PHRASE_DOCS, gram=2, shingle_docs=True, smoothing=sm)
            assert want[0]["options"], "model has options for %r" % text
            same_entries(b["suggest"]["p"], want, "%s %r bigrams %s" % (label, text, opts))
        # "brown fox" is a seen bigram, "brawn fox" is not: the bigram
        # model ranks the seen one first
        b = suggest(nodes[0], "phs", {"size": 0, "suggest": {"p": {
            "text": "brwn fox", "phrase": {"field": "t.sh", "size": 1,
                                           "direct_generator": [{"field": "t"}]}}}})
        eq([o["text"] for o in b["suggest"]["p"][0]["options"]], ["brown fox"],
           label + ": seen bigram first")


# ---- completion ----

SONGS = ["Nevermind", "Nirvana", "Nirvana Live at Reading", "Nothing Else Matters",
         "Never Gonna Give You Up", "No Surprises", "Numb", "November Rain", "Nutshell",
         "nirvana unplugged", "Other Song", "Night Fever", "Nights in White Satin"]


def completion_docs(seed):
    rnd = random.Random(seed)
    docs, w = [], 1000
    for i in range(40):
        ins = rnd.sample(SONGS, rnd.randint(1, 2))
        w -= rnd.randint(1, 20)  # distinct weights: one order on every shard layout
        if rnd.random() < 0.2:
            docs.append({"s": ins[0], "n": i})  # weight 1
        else:
            docs.append({"s": {"input": ins, "weight": w}, "n": i})
    return docs


C_DOCS = completion_docs(5)
C_MAPPING = {"properties": {"s": {"type": "completion"}, "n": {"type": "integer"}}}


def simple(text):
    """The simple analyzer: lowercase runs of letters."""
    out, cur = [], ""
    for ch in text + " ":
        if ch.isalpha():
            cur += ch.lower()
        elif cur:
            out.append(cur)
            cur = ""
    return " ".join(out)


def completion_model(prefix, docs, deleted=(), size=5, skip=False):
    key = simple(prefix)
    best = []
    for i, d in enumerate(docs):
        if str(i) in deleted:
            continue
        v = d["s"]
        ins, w = ([v], 1) if isinstance(v, str) else (v["input"], v["weight"])
        m = sorted((-w, t) for t in ins if simple(t).startswith(key))
        if m:
            best.append((m[0][0], m[0][1], str(i)))
    best.sort()
    out, seen = [], set()
    for nw, t, i in best:
        if skip and t in seen:
            continue
        seen.add(t)
        out.append({"text": t, "_id": i, "_score": float(-nw)})
    return out[:size]


@test
def completion_suggester_by_weight():
    for label, w, nodes in targets():
        st, b = w.req("PUT", "/songs", {"settings": {"number_of_shards": 3,
                                                     "number_of_replicas": 0},
                                        "mappings": C_MAPPING})
        eq(st, 200, "songs: %s" % b)
        lines = []
        for i, d in enumerate(C_DOCS):
            lines += [{"index": {"_index": "songs", "_id": str(i)}}, d]
        st, b = w.bulk(lines, params="?refresh=true")
        eq((st, b.get("errors")), (200, False), "bulk: %s" % b)
        # a deleted document is not suggested
        gone = next(str(i) for i, d in enumerate(C_DOCS) if isinstance(d["s"], dict))
        eq(w.req("DELETE", "/songs/_doc/%s?refresh=true" % gone)[0], 200, "delete")
        for n in nodes:
            for prefix, opts, model in [
                    ("nir", {}, {}), ("N", {"size": 7}, {"size": 7}),
                    ("n", {"size": 10, "skip_duplicates": True}, {"size": 10, "skip": True}),
                    ("NEVER gonna", {}, {}), ("zz", {}, {})]:
                body = {"field": "s"}
                body.update(opts)
                b = suggest(n, "songs", {"size": 0, "suggest": {"c": {
                    "prefix": prefix, "completion": body}}}, params="?typed_keys=true")
                (entry,) = b["suggest"]["completion#c"]
                eq((entry["text"], entry["offset"], entry["length"]),
                   (prefix, 0, len(prefix)), label + " entry")
                want = completion_model(prefix, C_DOCS, {gone}, **model)
                got = [{"text": o["text"], "_id": o["_id"], "_score": o["_score"]}
                       for o in entry["options"]]
                eq(got, want, "%s %r %s" % (label, prefix, opts))
                for o in entry["options"]:
                    eq((o["_index"], o["_type"], o["_source"]),
                       ("songs", "_doc", C_DOCS[int(o["_id"])]), label + " option")
        if label == "cluster":  # node partials name their options' index too
            for fm in ("serial", "per_node"):
                b = suggest(nodes[2], "songs", {"size": 0, "suggest": {"c": {
                    "prefix": "n", "completion": {"field": "s", "size": 8}}}},
                    params="?fanout=" + fm)
                eq([(o["_id"], o["_index"]) for o in b["suggest"]["c"][0]["options"]],
                   [(o["_id"], "songs") for o in completion_model("n", C_DOCS, {gone}, size=8)],
                   "fanout " + fm)
        st, b = nodes[0].req("GET", "/songs/_mapping")
        eq(b["songs"]["mappings"]["properties"]["s"], {
            "type": "completion", "analyzer": "simple", "preserve_separators": True,
            "preserve_position_increments": True, "max_input_length": 50}, label + " mapping")
        st, b = nodes[0].req("GET", "/songs/_field_caps?fields=s")
        eq(b["fields"]["s"], {"completion": {"type": "completion", "searchable": True,
                                             "aggregatable": False}}, label + " caps")
        error_is(w.req("PUT", "/songs/_doc/x", {"s": {"input": "a", "weight": 1.5}}), 400,
                 "mapper_parsing_exception", "weight must be an integer")
        error_is(w.req("PUT", "/songs/_doc/x", {"s": {"weight": 2}}), 400,
                 "mapper_parsing_exception", "[input] is required")
        error_is(w.req("PUT", "/bad-c", {"mappings": {"properties": {"s": {
            "type": "completion", "contexts": [{"name": "x", "type": "category"}]}}}}), 400,
            "mapper_parsing_exception", "[contexts] of completion field [s] are not supported")


# ---- refusals ----

@test
def suggest_refusals():
    for label, w, nodes in targets():
        make_index(w, "ts", DOCS, 3)
        n = nodes[-1]

        def bad(sg, status, etype, part):
            error_is(n.req("POST", "/ts/_search", {"suggest": sg}), status, etype, part)

        error_is(n.req("POST", "/ts/_search", {"suggest": {"s": {"text": "x", "completion": {
            "field": "t"}}}}), 400, "illegal_argument_exception",
            "Field [t] is not a completion suggest field")
        bad({"s": {"text": "x", "completion": {"field": "t", "fuzzy": {"fuzziness": 1}}}}, 400,
            "illegal_argument_exception", "[completion] suggester option [fuzzy] is not supported")
        bad({"s": {"text": "x", "completion": {"field": "t", "contexts": {}}}}, 400,
            "illegal_argument_exception", "option [contexts] is not supported")
        bad({"s": {"regex": "x.*", "completion": {"field": "t"}}}, 400,
            "illegal_argument_exception", "[regex] of the completion suggester is not supported")
        bad({"s": {"prefix": "x", "term": {"field": "t"}}}, 400,
            "illegal_argument_exception", "[prefix] is only for the completion suggester")
        bad({"s": {"text": "x", "term": {"field": "t", "bogus": 1}}}, 400,
            "parsing_exception", "suggester[term] doesn't support field [bogus]")
        bad({"s": {"text": "x", "phrase": {"field": "t", "bogus": 1}}}, 400,
            "parsing_exception", "suggester[phrase] doesn't support field [bogus]")
        bad({"s": {"text": "x", "term": {"size": 3}}}, 400, "parse_exception",
            "the required field option [field] is missing")
        bad({"s": {"text": "x", "phrase": {}}}, 400, "parse_exception",
            "the required field option [field] is missing")
        bad({"s": {"term": {"field": "t"}}}, 400, "illegal_argument_exception",
            "The required text option is missing")
        bad({"s": {"text": "x", "fuzzy": {"field": "t"}}}, 400,
            "named_object_not_found_exception", "unable to parse SuggestionBuilder with name "
            "[fuzzy]")
        bad({"s": {"text": "x", "term": {"field": "t", "suggest_mode": "often"}}}, 400,
            "illegal_argument_exception", "Illegal suggest mode often")
        bad({"s": {"text": "x", "term": {"field": "t", "sort": "alpha"}}}, 400,
            "illegal_argument_exception", "Illegal suggest sort alpha")
        bad({"s": {"text": "x", "term": {"field": "t", "max_edits": 3}}}, 400,
            "illegal_argument_exception", "Illegal max_edits value 3")
        bad({"s": {"text": "x", "term": {"field": "t", "string_distance": "ngram"}}}, 400,
            "illegal_argument_exception", "string_distance [ngram] is not supported")
        bad({"s": {"text": "x", "term": {"field": "t", "size": 0}}}, 400,
            "illegal_argument_exception", "size must be positive")
        bad({"s": {"text": "x", "phrase": {"field": "t", "collate": {}}}}, 400,
            "illegal_argument_exception", "[collate] is not supported")
        bad({"s": {"text": "x", "phrase": {"field": "t", "smoothing": {"katz": {}}}}}, 400,
            "illegal_argument_exception", "doesn't support object field [katz]")
        bad({"s": {"text": "x", "phrase": {"field": "t", "highlight": {"pre_tag": "<b>"}}}},
            400, "illegal_argument_exception", "Pre and post tag must both")
        bad({"s": {"text": "x", "phrase": {"field": "t", "direct_generator": [{}]}}}, 400,
            "x_content_parse_exception", "Required [field]")
        bad({"s": {"text": "x", "phrase": {"field": "t", "direct_generator": [
            {"field": "t", "nope": 1}]}}}, 400, "x_content_parse_exception",
            "[direct_generator] unknown field [nope]")
        # an unmapped field fails on every shard, as ES
        error_is(n.req("POST", "/ts/_search", {"suggest": {"s": {"text": "x", "term": {
            "field": "nope"}}}}), 400, "illegal_argument_exception",
            "no mapping found for field [nope]")
        bad({"s": {"text": "x", "phrase": {"field": "t", "smoothing": {
            "linear_interpolation": {"trigram_lambda": 0.5, "bigram_lambda": 0.5,
                                     "unigram_lambda": 0.5}}}}}, 400,
            "illegal_argument_exception", "must sum to 1")


if __name__ == "__main__":
    run_tests(budget_s=120, teardown=teardown)
