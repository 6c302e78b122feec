#!/usr/bin/env python3
"""W1 data: the 1,000 sample accounts replicated x20 with distinct ids, plus
the seven W1 queries for Shoal (HTTP/ES DSL) and for Sphinx (SphinxQL), each
with its exact count from a brute-force pass over the same documents.

Usage: w1_data.py SAMPLE.ndjson OUTDIR [--copies 20]
Writes OUTDIR/bulk.ndjson (Elasticsearch _bulk body, index "accounts"),
OUTDIR/docs.tsv (Sphinx tsvpipe rows: id, firstname, gender, age, balance,
state), OUTDIR/q_http.ndjson and OUTDIR/q_sphinx.ndjson (loadgen query files).
"""
import argparse
import json
import os
import re

# BENCHMARKS.md, W1 table: hits on 20,000 documents
PUBLISHED = [20000, 9880, 600, 10040, 12300, 360, 7440]


def tokens(s):
    return re.findall(r"[a-z0-9]+", s.lower())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sample")
    ap.add_argument("outdir")
    ap.add_argument("--copies", type=int, default=20)
    a = ap.parse_args()
    base = [json.loads(l) for l in open(a.sample) if l.strip()]
    os.makedirs(a.outdir, exist_ok=True)
    docs = []
    for c in range(a.copies):
        for d in base:
            d = dict(d)
            d["id"] = c * len(base) + d["id"]
            docs.append(d)
    with open(os.path.join(a.outdir, "bulk.ndjson"), "w") as f:
        for d in docs:
            f.write('{"index":{"_index":"accounts","_id":"%d"}}\n' % d["id"])
            f.write(json.dumps(d, separators=(",", ":")) + "\n")
    with open(os.path.join(a.outdir, "docs.tsv"), "w") as f:
        for d in docs:
            clean = lambda s: str(s).replace("\t", " ").replace("\n", " ")
            f.write("%d\t%s\t%s\t%d\t%.2f\t%s\n" % (d["id"], clean(d["name"]["firstName"]), clean(d.get("gender", "")),
                                                   d["age"], d["balance"], clean(d["contact"]["state"])))
    preds = [
        ({"match_all": {}}, "", lambda d: True),
        ({"term": {"gender.keyword": "male"}}, "WHERE gender='male'", lambda d: d.get("gender") == "male"),
        ({"match": {"name.firstName": "Michael"}}, "WHERE MATCH('@firstname Michael')",
         lambda d: "michael" in tokens(d["name"]["firstName"])),
        ({"range": {"age": {"gte": 20, "lte": 30}}}, "WHERE age BETWEEN 20 AND 30",
         lambda d: 20 <= d["age"] <= 30),
        ({"range": {"balance": {"gte": 1000, "lte": 3000}}}, "WHERE balance BETWEEN 1000.0 AND 3000.0",
         lambda d: 1000 <= d["balance"] <= 3000),
        ({"term": {"contact.state.keyword": "California"}}, "WHERE state='California'",
         lambda d: d["contact"]["state"] == "California"),
        ({"bool": {"must": [{"term": {"gender.keyword": "male"}}, {"range": {"age": {"gte": 25, "lte": 40}}}]}},
         "WHERE gender='male' AND age BETWEEN 25 AND 40",
         lambda d: d.get("gender") == "male" and 25 <= d["age"] <= 40),
    ]
    with open(os.path.join(a.outdir, "q_http.ndjson"), "w") as fh, \
            open(os.path.join(a.outdir, "q_sphinx.ndjson"), "w") as fs:
        for i, (q, where, pred) in enumerate(preds):
            n = sum(1 for d in docs if pred(d))
            if a.copies == 20 and len(base) == 1000 and n != PUBLISHED[i]:
                raise SystemExit("w1_data: query %d counts %d, BENCHMARKS.md says %d" % (i + 1, n, PUBLISHED[i]))
            fh.write(json.dumps({"path": "/accounts/_search",
                                 "body": {"query": q, "track_total_hits": True}, "expect": n}) + "\n")
            sql = "SELECT * FROM accounts %s LIMIT 10; SHOW META" % where
            fs.write(json.dumps({"sql": sql.replace("  ", " "), "expect": n}) + "\n")
    print("w1_data: %d docs in %s" % (len(docs), a.outdir))


if __name__ == "__main__":
    main()
