#!/usr/bin/env python3
"""W2 facet corpus (docs/benchmarks.md, "W2"): N documents as NDJSON.

Usage: gen_w2.py N [--seed S] [--out FILE]     (stdout when no --out)

Every value is a pure function of (seed, document id), so any engine, any
run and any N sees the same document for the same id:

  id        "1" .. "N" (string; also the document _id)
  k10 k100 k1k k10k k100k k1m   keyword, 10 .. 1M distinct values, Zipf s=1.15
  k5m                            keyword, 5M distinct values, Zipf s=1.0
  k2m k500k                      keyword, 2M / 500K values, uniform
  s99 s50 s10 s1 s0_1 s0_01 s0_001
                                 keyword "yes"/"no": nested subsets holding
                                 99%, 50%, ..., 0.001% of the documents
  price_i   integer 0..99999 (uniform)
  sort_i    integer 0..2^31-1 (uniform)
  date_dt   date, 2010-01-01 .. 2025-12-31, ISO-8601 UTC, second precision
Cardinalities are capped by N (a Zipf field over min(K, N) values).
"""
import argparse
import array
import bisect
import itertools
import sys
import time

MASK = (1 << 64) - 1

# (name, distinct values, shape, zipf exponent)
KEYWORDS = [
    ("k10", 10, "zipf", 1.15),
    ("k100", 100, "zipf", 1.15),
    ("k1k", 1000, "zipf", 1.15),
    ("k10k", 10000, "zipf", 1.15),
    ("k100k", 100000, "zipf", 1.15),
    ("k1m", 1000000, "zipf", 1.15),
    ("k5m", 5000000, "zipf", 1.0),
    ("k2m", 2000000, "uniform", 0),
    ("k500k", 500000, "uniform", 0),
]
# (name, fraction of documents); nested because one uniform draw decides all
SUBSETS = [
    ("s99", 0.99),
    ("s50", 0.50),
    ("s10", 0.10),
    ("s1", 0.01),
    ("s0_1", 0.001),
    ("s0_01", 0.0001),
    ("s0_001", 0.00001),
]
DATE_LO = 1262304000  # 2010-01-01T00:00:00Z
DATE_HI = 1767225600  # 2026-01-01T00:00:00Z (exclusive)


def mix(x):
    """splitmix64 finaliser: a bijective 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def unit(h):
    """64-bit hash -> float in [0, 1)."""
    return (h >> 11) * (1.0 / (1 << 53))


def _days_to_civil(z):
    # Howard Hinnant's civil_from_days: exact proleptic Gregorian, no tz.
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return (y + 1 if m <= 2 else y), m, d


def iso_utc(secs):
    days, rem = divmod(secs, 86400)
    y, m, d = _days_to_civil(days)
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (y, m, d, rem // 3600, rem // 60 % 60, rem % 60)


class W2:
    """Computes the W2 fields of document id i (1-based) for a corpus of n."""

    def __init__(self, n, seed=42):
        self.seed = seed
        self.fields = []
        for fi, (name, card, shape, s) in enumerate(KEYWORDS):
            k = max(1, min(card, n))
            cum = None
            if shape == "zipf":
                cum = array.array("d", itertools.accumulate(r ** -s for r in range(1, k + 1)))
            self.fields.append((name, k, cum, mix(seed * 1000003 + fi + 1)))
        self.sub_salt = mix(seed * 1000003 + 101)
        self.num_salt = [mix(seed * 1000003 + 201 + j) for j in range(3)]

    def rank(self, fidx, i):
        name, k, cum, salt = self.fields[fidx]
        h = mix(salt ^ i)
        if cum is None:
            return h % k + 1
        return bisect.bisect_right(cum, unit(h) * cum[-1]) + 1 if k > 1 else 1

    def json_fields(self, i):
        """The W2 fields of document i as a JSON object body (no braces)."""
        parts = []
        for fidx, (name, k, cum, salt) in enumerate(self.fields):
            h = mix(salt ^ i)
            if cum is None:
                r = h % k + 1
            else:
                r = min(bisect.bisect_right(cum, unit(h) * cum[-1]), k - 1) + 1
            parts.append('"%s":"v%d"' % (name, r))
        u = unit(mix(self.sub_salt ^ i))
        for name, frac in SUBSETS:
            parts.append('"%s":"%s"' % (name, "yes" if u < frac else "no"))
        parts.append('"price_i":%d' % (mix(self.num_salt[0] ^ i) % 100000))
        parts.append('"sort_i":%d' % (mix(self.num_salt[1] ^ i) % 2147483648))
        secs = DATE_LO + mix(self.num_salt[2] ^ i) % (DATE_HI - DATE_LO)
        parts.append('"date_dt":"%s"' % iso_utc(secs))
        return ",".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.n < 1 or a.n > 100_000_000:
        sys.exit("N must be in 1..100000000")
    t0 = time.time()
    w = W2(a.n, a.seed)
    out = open(a.out, "w") if a.out else sys.stdout
    buf = []
    for i in range(1, a.n + 1):
        buf.append('{"id":"%d",%s}\n' % (i, w.json_fields(i)))
        if len(buf) >= 10000:
            out.write("".join(buf))
            buf.clear()
    out.write("".join(buf))
    if a.out:
        out.close()
    print("gen_w2: %d docs seed=%d in %.1fs" % (a.n, a.seed, time.time() - t0), file=sys.stderr)


if __name__ == "__main__":
    main()
