#!/usr/bin/env python3
"""W3 query classes and W2 facet cells for a corpus, with exact expected counts.

Usage: gen_queries.py CORPUS.ndjson OUT.ndjson [--seed S] [--per-class Q]

One JSON line per query:
  {"class": "...", "body": {Elasticsearch _search body},
   "lucene": {engine-neutral spec read by LuceneBench.java and xapian_bench.py},
   "expect": exact hit count}

Text classes (only when the corpus has `body`), Q queries each, each query in
three modes — TOP_10 and TOP_100 (`track_total_hits: false`, `_source: false`)
and COUNT (`size: 0`, `track_total_hits: true`):
  term_high/term_med/term_low      term on body (high: the 50 most frequent
                                    terms; med: df in [N/1000, N/100];
                                    low: df in [2, max(5, N/20000)])
  and_hh/and_hm/and_hl, or_hh/or_hm/or_hl   `match` of two terms, operator and/or
  phrase, sloppy_phrase             match_phrase of a real word pair (slop 0 / 2)
  prefix3, wildcard, regexp         on body terms
Facet cells (corpora with the W2 fields):
  agg_<field>_<subset>   terms aggregation (size 10) on each of the nine
                         keyword fields under a filter on each subset field
  sort_<subset>          top-10 by sort_i ascending under each subset filter
  range_price, range_date   range counts of several widths

Counts come from a brute-force pass over the corpus with lowercase +
[a-z0-9]+ tokenization, which equals Unicode word segmentation on the
ASCII-folded text gen_w3.py writes.  A query that matches nothing is dropped
and replaced; the file never holds a zero count.
"""
import argparse
import collections
import json
import random
import re
import sys
import time

TOKEN = re.compile(r"[a-z0-9]+")
WORD = re.compile(r"[a-z]{2,}")
SUBSETS = ["s99", "s50", "s10", "s1", "s0_1", "s0_01", "s0_001"]
KEYWORDS = ["k10", "k100", "k1k", "k10k", "k100k", "k1m", "k5m", "k2m", "k500k"]
SLOP = 2
DATE_LO = 1262304000


def tokens(text):
    return TOKEN.findall(text.lower())


def iso(secs):
    sys.path.insert(0, __file__.rsplit("/", 1)[0] if "/" in __file__ else ".")
    from gen_w2 import iso_utc
    return iso_utc(secs)


def scan(path):
    with open(path) as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def glob_to_re(p):
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in p)


def lucene_re_to_py(p):
    # the generated patterns only use [a-z], ., *, {n} and literals, which
    # mean the same in Lucene's RegExp and Python's re
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--per-class", type=int, default=8)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    t0 = time.time()

    # ---- pass 1: document frequencies, word pairs, which fields exist
    df = collections.Counter()
    pairs = []
    n = 0
    has_text = has_w2 = False
    for d in scan(a.corpus):
        n += 1
        if "body" in d:
            has_text = True
            toks = tokens(d["body"])
            df.update(set(toks))
            # reservoir of adjacent word pairs for phrases
            if len(toks) > 1:
                j = rng.randrange(len(toks) - 1)
                pr = (toks[j], toks[j + 1])
                if len(pairs) < 20000:
                    pairs.append(pr)
                else:
                    r = rng.randrange(n)
                    if r < 20000:
                        pairs[r] = pr
        if "s99" in d:
            has_w2 = True
    if n == 0:
        sys.exit("empty corpus")
    Q = a.per_class
    text_queries = []  # (class, kind, data)
    if has_text:
        words = [(t, c) for t, c in df.items() if WORD.fullmatch(t)]
        words.sort(key=lambda x: (-x[1], x[0]))
        high = [t for t, _ in words[:50]]
        med = [t for t, c in words if n / 1000 <= c <= max(n / 100, 3) and c >= 3]
        lowmax = max(5, n // 20000)
        low = [t for t, c in words if 2 <= c <= lowmax and len(t) >= 4]
        if not med:
            med = [t for t, _ in words[50:500]]
        if not low:
            low = [t for t, _ in words[-200:]]
        vocab = list(df)

        def pick(lst, k):
            return rng.sample(lst, min(k, len(lst))) if lst else []

        def two(a1, b1, k):
            out = set()
            for _ in range(k * 20):
                if len(out) >= k:
                    break
                x, y = rng.choice(a1), rng.choice(b1)
                if x != y:
                    out.add((x, y))
            return sorted(out)

        for band, lst in (("high", high), ("med", med), ("low", low)):
            for t in pick(lst, Q * 2):
                text_queries.append(("term_" + band, "term", (t,)))
        for tag, b2 in (("hh", high), ("hm", med), ("hl", low)):
            for x, y in two(high, b2, Q * 2):
                text_queries.append(("and_" + tag, "and", (x, y)))
            for x, y in two(high, b2, Q * 2):
                text_queries.append(("or_" + tag, "or", (x, y)))
        good_pairs = sorted({p for p in pairs if p[0] != p[1] and WORD.fullmatch(p[0]) and WORD.fullmatch(p[1])})
        for p in pick(good_pairs, Q * 2):
            text_queries.append(("phrase", "phrase", p))
        for p in pick(good_pairs, Q * 2):
            text_queries.append(("sloppy_phrase", "sloppy", p))
        longish = [t for t in high + med if len(t) >= 3]
        for p in sorted({t[:3] for t in longish}):
            text_queries.append(("prefix3", "prefix", (p,)))
        six = [t for t in med + high if len(t) >= 6]
        for t in pick(six, Q * 2):
            pat = t[:2] + "*" + t[-3:] if rng.random() < 0.5 else t[:3] + "?" + t[4:]
            text_queries.append(("wildcard", "wildcard", (pat,)))
        for t in pick(six, Q * 2):
            pat = t[:2] + "[a-z]" + t[3:5] + ".*"
            text_queries.append(("regexp", "regexp", (pat,)))
        # multi-term expansions over the whole vocabulary
        expand = {}
        for cls, kind, data in text_queries:
            if kind == "prefix":
                expand[data[0]] = frozenset(t for t in vocab if t.startswith(data[0]))
            elif kind == "wildcard":
                r = re.compile(glob_to_re(data[0]))
                expand[data[0]] = frozenset(t for t in vocab if r.fullmatch(t))
            elif kind == "regexp":
                r = re.compile(lucene_re_to_py(data[0]))
                expand[data[0]] = frozenset(t for t in vocab if r.fullmatch(t))
        prefix_q = [q for q in text_queries if q[1] == "prefix"]
        rng.shuffle(prefix_q)
        text_queries = [q for q in text_queries if q[1] != "prefix"] + prefix_q[:Q * 2]

    # ---- pass 2: exact counts
    counts = [0] * len(text_queries)
    by_first = collections.defaultdict(list)  # first term -> query indexes
    multi = []
    for qi, (cls, kind, data) in enumerate(text_queries):
        if kind in ("prefix", "wildcard", "regexp"):
            multi.append((qi, expand[data[0]]))
        elif kind == "or":
            by_first[data[0]].append(qi)
            by_first[data[1]].append(qi)
        else:
            by_first[data[0]].append(qi)
    first_terms = frozenset(by_first)
    facet_ranges_price = []
    for width in (1000, 10000, 50000, 90000):
        lo = rng.randrange(0, 100000 - width)
        facet_ranges_price.append((lo, lo + width - 1))
    facet_ranges_date = []
    for days in (7, 31, 365, 1825):
        lo = DATE_LO + rng.randrange(0, 16 * 365 - days) * 86400
        facet_ranges_date.append((lo, lo + days * 86400 - 1))
    sub_count = collections.Counter()
    price_count = [0] * len(facet_ranges_price)
    date_count = [0] * len(facet_ranges_date)
    date_re = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z")
    import calendar
    for d in scan(a.corpus):
        if has_text:
            toks = tokens(d["body"])
            s = set(toks)
            pos = None
            for t in s & first_terms:
                for qi in by_first[t]:
                    cls, kind, data = text_queries[qi]
                    if kind == "term":
                        counts[qi] += 1
                    elif kind == "and":
                        if data[1] in s:
                            counts[qi] += 1
                    elif kind == "or":
                        # counted once: through its first present term
                        if t == data[0] or data[0] not in s:
                            counts[qi] += 1
                    elif data[1] in s:
                        if pos is None:
                            pos = collections.defaultdict(list)
                            for p, w in enumerate(toks):
                                pos[w].append(p)
                        pa, pb = pos[data[0]], set(pos[data[1]])
                        if kind == "phrase":
                            ok = any(p + 1 in pb for p in pa)
                        else:  # Lucene sloppy phrase: |(pb - 1) - pa| <= slop
                            ok = any(p + dlt in pb for p in pa for dlt in range(1 - SLOP, 2 + SLOP) if dlt)
                        if ok:
                            counts[qi] += 1
            for qi, e in multi:
                if not s.isdisjoint(e):
                    counts[qi] += 1
        if has_w2:
            for f in SUBSETS:
                if d[f] == "yes":
                    sub_count[f] += 1
            p = d["price_i"]
            for i, (lo, hi) in enumerate(facet_ranges_price):
                if lo <= p <= hi:
                    price_count[i] += 1
            m = date_re.fullmatch(d["date_dt"])
            secs = calendar.timegm(tuple(int(x) for x in m.groups()))
            for i, (lo, hi) in enumerate(facet_ranges_date):
                if lo <= secs <= hi:
                    date_count[i] += 1

    # ---- write
    lines = []

    def emit(cls, body, spec, expect):
        lines.append(json.dumps({"class": cls, "body": body, "lucene": spec, "expect": expect},
                                separators=(",", ":")))

    per_class = collections.Counter()
    for qi, (cls, kind, data) in enumerate(text_queries):
        if counts[qi] == 0 or per_class[cls] >= Q:
            continue
        per_class[cls] += 1
        if kind == "term":
            q, spec = {"term": {"body": data[0]}}, {"t": "term", "f": "body", "v": data[0]}
        elif kind in ("and", "or"):
            q = {"match": {"body": {"query": " ".join(data), "operator": kind}}}
            spec = {"t": kind, "c": [{"t": "term", "f": "body", "v": w} for w in data]}
        elif kind in ("phrase", "sloppy"):
            slop = 0 if kind == "phrase" else SLOP
            q = {"match_phrase": {"body": {"query": " ".join(data), "slop": slop}}}
            spec = {"t": "phrase", "f": "body", "v": list(data), "slop": slop}
        else:
            q = {kind: {"body": data[0]}}
            spec = {"t": kind, "f": "body", "v": data[0]}
        for mode, k in (("TOP_10", 10), ("TOP_100", 100), ("COUNT", 0)):
            if k:
                body = {"query": q, "size": k, "track_total_hits": False, "_source": False}
                ls = {"mode": "top", "k": k, "q": spec}
            else:
                body = {"query": q, "size": 0, "track_total_hits": True}
                ls = {"mode": "count", "q": spec}
            emit("%s.%s" % (cls, mode), body, ls, counts[qi])
    if has_text:
        for cls in sorted({c for c, _, _ in text_queries}):
            if per_class[cls] == 0:
                print("gen_queries: warning: class %s has no matching query" % cls, file=sys.stderr)
    if has_w2:
        for f in SUBSETS:
            if sub_count[f] == 0:
                continue
            filt = {"bool": {"filter": [{"term": {f: "yes"}}]}}
            fspec = {"t": "filter", "c": [{"t": "term", "f": f, "v": "yes"}]}
            for kf in KEYWORDS:
                emit("agg_%s_%s" % (kf, f),
                     {"size": 0, "track_total_hits": True, "query": filt,
                      "aggs": {"t": {"terms": {"field": kf, "size": 10}}}},
                     {"mode": "agg", "field": kf, "k": 10, "q": fspec}, sub_count[f])
            emit("sort_%s" % f,
                 {"size": 10, "track_total_hits": False, "_source": False, "query": filt,
                  "sort": [{"sort_i": "asc"}]},
                 {"mode": "sort", "field": "sort_i", "k": 10, "q": fspec}, sub_count[f])
        for (lo, hi), c in zip(facet_ranges_price, price_count):
            if c:
                emit("range_price", {"size": 0, "track_total_hits": True,
                                     "query": {"range": {"price_i": {"gte": lo, "lte": hi}}}},
                     {"mode": "count", "q": {"t": "range_int", "f": "price_i", "lo": lo, "hi": hi}}, c)
        for (lo, hi), c in zip(facet_ranges_date, date_count):
            if c:
                emit("range_date", {"size": 0, "track_total_hits": True,
                                    "query": {"range": {"date_dt": {"gte": iso(lo), "lte": iso(hi)}}}},
                     {"mode": "count", "q": {"t": "range_long", "f": "date_dt",
                                             "lo": lo * 1000, "hi": hi * 1000 + 999}}, c)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("gen_queries: %d docs, %d queries in %d classes, seed=%d, %.1fs"
          % (n, len(lines), len({json.loads(l)["class"] for l in lines}), a.seed, time.time() - t0),
          file=sys.stderr)


if __name__ == "__main__":
    main()
