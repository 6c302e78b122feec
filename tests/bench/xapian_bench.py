#!/usr/bin/python3
"""Xapian 1.4 peer for W5 (Debian python3-xapian; run with /usr/bin/python3).

  xapian_bench.py index DOCS DBDIR
      Indexes a gen_w3.py / gen_w2.py corpus (glass backend): body terms
      unprefixed with positions, title prefixed "S", no stemmer; every keyword
      field as a boolean term "X<FIELD>:<value>" and in a value slot (for
      facet counts); price_i, sort_i, date_dt (epoch ms) as sortable values.
      Prints one JSON line (docs, seconds, CPU seconds, bytes).
  xapian_bench.py query DBDIR QUERIES REPEAT
      Runs a gen_queries.py file one-threaded: an untimed validation pass
      (exact counts), then REPEAT rounds per class; one JSON line per class
      (qps, p50/p99 in microseconds, counts), like LuceneBench.

Differences from Lucene that the W5 table notes: Xapian 1.4 has no
mid-pattern wildcard or regexp query, so wildcard/regexp expand over the
term list here (in the timed path); a sloppy phrase is OP_NEAR, which
allows any order within the window, so its counts can exceed Lucene's;
`TOP_k` asks get_mset for k hits with Xapian's default (inexact) counting,
`COUNT` for an exact count (check_at_least = all documents).
"""
import json
import os
import re
import resource
import sys
import time

import xapian

KEYWORDS = ["k10", "k100", "k1k", "k10k", "k100k", "k1m", "k5m", "k2m", "k500k",
            "s99", "s50", "s10", "s1", "s0_1", "s0_01", "s0_001", "id"]
SLOT = {k: 3 + i for i, k in enumerate(KEYWORDS)}
SLOT.update({"price_i": 0, "sort_i": 1, "date_dt": 2})
DATE = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z")


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def date_ms(s):
    import calendar
    m = DATE.fullmatch(s)
    return calendar.timegm(tuple(int(x) for x in m.groups())) * 1000


def boolean_term(field, value):
    return "X%s:%s" % (field.upper(), value)


def index(docs, dbdir):
    t0, c0 = time.time(), cpu()
    db = xapian.WritableDatabase(dbdir, xapian.DB_CREATE_OR_OVERWRITE)
    tg = xapian.TermGenerator()  # no stemmer: no stemming
    n = 0
    db.begin_transaction(False)
    with open(docs) as f:
        for line in f:
            if not line.strip():
                continue
            d = json.loads(line)
            doc = xapian.Document()
            tg.set_document(doc)
            if "title" in d:
                tg.index_text(d["title"], 1, "S")
            if "body" in d:
                tg.index_text(d["body"])
            for k in KEYWORDS:
                if k in d:
                    doc.add_boolean_term(boolean_term(k, d[k]))
                    doc.add_value(SLOT[k], str(d[k]))
            for k in ("price_i", "sort_i"):
                if k in d:
                    doc.add_value(SLOT[k], xapian.sortable_serialise(d[k]))
            if "date_dt" in d:
                doc.add_value(SLOT["date_dt"], xapian.sortable_serialise(date_ms(d["date_dt"])))
            doc.set_data(line.rstrip("\n"))
            db.replace_document(int(d["id"]), doc)
            n += 1
            if n % 100000 == 0:
                db.commit_transaction()
                db.begin_transaction(False)
    db.commit_transaction()
    db.commit()
    db.close()
    el, c = time.time() - t0, cpu() - c0
    size = sum(os.path.getsize(os.path.join(dbdir, f)) for f in os.listdir(dbdir))
    print(json.dumps({"engine": "xapian", "version": xapian.version_string(), "docs": n,
                      "total_s": round(el, 3), "cpu_s": round(c, 3),
                      "docs_per_cpu_s": round(n / c) if c else None, "index_bytes": size}))


class Runner:
    def __init__(self, db):
        self.db = db
        self.n = db.get_doccount()
        self.enq = xapian.Enquire(db)
        self.enq.set_weighting_scheme(xapian.BM25Weight())
        self.expansions = {}

    def expand(self, kind, pat):
        """Terms matching a wildcard/regexp pattern, from the term list."""
        if kind == "wildcard":
            lit = re.match(r"[^*?]*", pat).group(0)
            rx = re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pat))
        else:
            lit = re.match(r"[a-z0-9]*", pat).group(0)
            if lit and len(pat) > len(lit) and pat[len(lit)] in "*?{":
                lit = lit[:-1]
            rx = re.compile(pat)
        return [t.term.decode() for t in self.db.allterms(lit) if rx.fullmatch(t.term.decode())]

    def build(self, s):
        t = s["t"]
        Q = xapian.Query
        if t == "term":
            if s["f"] == "body":
                return Q(s["v"])
            if s["f"] == "title":
                return Q("S" + s["v"])
            return Q(boolean_term(s["f"], s["v"]))
        if t in ("and", "or"):
            return Q(Q.OP_AND if t == "and" else Q.OP_OR, [self.build(c) for c in s["c"]])
        if t == "filter":
            return Q(Q.OP_SCALE_WEIGHT, Q(Q.OP_AND, [self.build(c) for c in s["c"]]), 0)
        if t == "phrase":
            terms = [Q(w) for w in s["v"]]
            if s.get("slop", 0) == 0:
                return Q(Q.OP_PHRASE, terms, len(terms))
            return Q(Q.OP_NEAR, terms, len(terms) + s["slop"])
        if t == "prefix":
            return Q(Q.OP_WILDCARD, s["v"], 0, Q.WILDCARD_LIMIT_ERROR, Q.OP_SYNONYM)
        if t in ("wildcard", "regexp"):
            # expanded per run: Xapian 1.4 cannot do this inside the matcher
            return ("expand", t, s["v"])
        if t in ("range_int", "range_long"):
            return Q(Q.OP_VALUE_RANGE, SLOT[s["f"]], xapian.sortable_serialise(s["lo"]),
                     xapian.sortable_serialise(s["hi"]))
        raise ValueError("unknown query type " + t)

    def query_of(self, q):
        if isinstance(q, tuple):
            terms = self.expand(q[1], q[2])
            return xapian.Query(xapian.Query.OP_SYNONYM, [xapian.Query(x) for x in terms])
        return q

    def run(self, spec, q):
        enq = self.enq
        enq.set_query(self.query_of(q))
        mode = spec["mode"]
        if mode == "count":
            enq.set_sort_by_relevance()
            return enq.get_mset(0, 0, self.n).get_matches_estimated()
        if mode == "top":
            enq.set_sort_by_relevance()
            ms = enq.get_mset(0, spec["k"])
            return len([m.docid for m in ms])
        if mode == "sort":
            enq.set_sort_by_value_then_relevance(SLOT[spec["field"]], False)
            ms = enq.get_mset(0, spec["k"])
            return len([m.docid for m in ms])
        if mode == "agg":
            enq.set_sort_by_relevance()
            spy = xapian.ValueCountMatchSpy(SLOT[spec["field"]])
            enq.add_matchspy(spy)
            ms = enq.get_mset(0, 0, self.n)
            top = [(x.term, x.termfreq) for x in spy.top_values(spec["k"])]
            enq.clear_matchspies()
            return ms.get_matches_estimated() if top is not None else 0
        raise ValueError("unknown mode " + mode)


def query(dbdir, qfile, repeat):
    db = xapian.Database(dbdir)
    r = Runner(db)
    qs = []
    for line in open(qfile):
        if line.strip():
            o = json.loads(line)
            qs.append((o["class"], o["lucene"], r.build(o["lucene"]["q"]), o["expect"]))
    counts = []
    bad = 0
    for cls, spec, q, expect in qs:
        c = r.run(dict(spec, mode="count") if spec["mode"] in ("top", "sort") else spec, q)
        counts.append(c)
        bad += c != expect
    by = {}
    for i, (cls, spec, q, expect) in enumerate(qs):
        by.setdefault(cls, []).append(i)
    for _ in range(2):  # warm-up
        for cls, spec, q, expect in qs:
            r.run(spec, q)
    for cls, idx in by.items():
        lat = []
        b0 = time.perf_counter()
        for _ in range(repeat):
            for i in idx:
                q0 = time.perf_counter()
                r.run(qs[i][1], qs[i][2])
                lat.append(time.perf_counter() - q0)
        el = time.perf_counter() - b0
        lat.sort()
        m = len(lat)
        print(json.dumps({"engine": "xapian", "class": cls, "queries": len(idx), "runs": m,
                          "qps": round(m / el, 1), "p50_us": round(lat[(m - 1) // 2] * 1e6, 1),
                          "p99_us": round(lat[int((m - 1) * 0.99)] * 1e6, 1),
                          "counts": [counts[i] for i in idx],
                          "mismatches": sum(counts[i] != qs[i][3] for i in idx)}), flush=True)
    print("xapian %s: %d queries, %d count mismatches, docs=%d"
          % (xapian.version_string(), len(qs), bad, r.n), file=sys.stderr)


def main():
    a = sys.argv
    if len(a) >= 4 and a[1] == "index":
        index(a[2], a[3])
    elif len(a) >= 5 and a[1] == "query":
        query(a[2], a[3], int(a[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
