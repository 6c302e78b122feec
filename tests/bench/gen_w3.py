#!/usr/bin/env python3
"""W3 full-text corpus from Debian's dict-gcide, plus the W2 fields.

Usage: gen_w3.py N [--seed S] [--out FILE] [--dict DIR] [--short]   (stdout when no --out)

Needs `apt-get install dict-gcide` (/usr/share/dictd/gcide.dict.dz + .index).
Every distinct GCIDE entry (126,240 in 0.48.5) is one document: the first
headword is `title`, the definition text is `body`.  When N exceeds the
number of entries, synthetic documents fill the rest: their length is drawn
from the real body lengths and their words from a first-order Markov chain
over GCIDE's own token stream (the next word is the successor of a random
occurrence of the current word), which keeps the real term frequencies and
realistic word pairs.  When N is smaller, entries are taken at an even stride.

Text is folded to ASCII (accents dropped) and written as words of [A-Za-z0-9]
separated by spaces and end-of-word punctuation, so Unicode word segmentation
(Lucene's StandardTokenizer, Shoal's `standard`), Xapian's TermGenerator and
the brute-force counter in gen_queries.py all cut the same tokens.

Each document also carries the W2 fields of its id (gen_w2.py), computed for
a corpus of N.  Deterministic from --seed.

--short: the short-document mode, every body at a dictionary entry's length
(~300 bytes on average: GCIDE's own entries, and generated bodies whose
lengths are drawn from theirs).  It is what the generator writes today, so
the output is byte-identical with or without it; the flag names the mode so
that `w5.sh --corpus short` (126,236 = every GCIDE entry, and 926,000
documents) keeps this corpus should the default ever change.
"""
import argparse
import array
import gzip
import os
import random
import re
import sys
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_w2 import W2, mix  # noqa: E402

B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
PRON = re.compile(r"\\[^\\\n]*\\")  # \Am"ple*ness\ pronunciation marks
SOURCE = re.compile(r"\[(?:[^\]]{0,40}(?:Webster|PJC|WordNet|Century|Chambers|Suppl|Stormonth|Encyc|Obs\.)[^\]]{0,40})\]")
INNER = re.compile(r"(?<=[A-Za-z0-9])[^A-Za-z0-9\s.,;:!?]+(?=[A-Za-z0-9])|(?<=[A-Za-z0-9])[.,;:!?]+(?=[A-Za-z0-9])")
NONWORD = re.compile(r"[^A-Za-z0-9.,;:!? ]+")
PUNCT_RUN = re.compile(r"(?:(?<= )|^)[.,;:!?]+")
SPACES = re.compile(r"\s+")
TOKEN = re.compile(r"[a-z0-9]+")


def b64(s):
    v = 0
    for c in s:
        v = v * 64 + B64[c]
    return v


def ascii_fold(s):
    return unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode("ascii")


def clean(text):
    """GCIDE entry text -> words of [A-Za-z0-9] with end-of-word punctuation."""
    text = PRON.sub(" ", text)
    text = SOURCE.sub(" ", text)
    text = ascii_fold(text)
    # characters between two word characters split the word (a-b, a'b, 1.5)
    text = INNER.sub(" ", text)
    text = NONWORD.sub(" ", text)
    text = PUNCT_RUN.sub(" ", text)
    return SPACES.sub(" ", text).strip()


def load_gcide(d):
    raw = gzip.open(os.path.join(d, "gcide.dict.dz")).read()
    entries = {}
    with open(os.path.join(d, "gcide.index"), encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3 or parts[0].startswith("00-"):
                continue
            key = (b64(parts[1]), b64(parts[2]))
            if key not in entries:
                entries[key] = parts[0]
    docs = []
    for (off, ln), head in sorted(entries.items()):
        text = raw[off:off + ln].decode("utf-8", "replace")
        nl = text.find("\n")
        # the first line starts with the headword itself; keep the rest of it
        first = text[:nl] if nl >= 0 else text
        rest = text[nl + 1:] if nl >= 0 else ""
        hw = first.find("\\")
        first = first[hw:] if hw >= 0 else first[len(head):]
        body = clean(first + "\n" + rest)
        title = clean(head)
        if not body or not title:
            continue
        docs.append((title, body))
    return docs


class Markov:
    """Word successor chain over the concatenated GCIDE token stream."""

    def __init__(self, bodies):
        ids = {}
        words = []
        stream = array.array("I")
        lengths = array.array("I")
        for b in bodies:
            toks = b.split(" ")
            lengths.append(len(toks))
            for w in toks:
                t = ids.get(w)
                if t is None:
                    t = ids[w] = len(words)
                    words.append(w)
                stream.append(t)
        n = len(stream)
        counts = [0] * len(words)
        for t in stream:
            counts[t] += 1
        start = [0] * (len(words) + 1)
        for t in range(len(words)):
            start[t + 1] = start[t] + counts[t]
        fill = start[:-1]
        occ = array.array("I", bytes(4 * n))
        for p in range(n - 1):  # occurrences that have a successor
            t = stream[p]
            occ[fill[t]] = p
            fill[t] += 1
        self.words, self.stream, self.lengths = words, stream, lengths
        self.start, self.fill, self.occ = start, fill, occ
        # per word: first successor slot, successor count and its bit length,
        # so body() draws exactly as rng.randrange would without its overhead
        self.lo = start[:-1]
        self.width = [fill[t] - start[t] for t in range(len(words))]
        self.bits = [w.bit_length() for w in self.width]
        self.stream_l, self.occ_l = stream.tolist(), occ.tolist()

    def body(self, rng, length):
        # rng.randrange(n) is rng._randbelow(n): getrandbits(n.bit_length())
        # drawn until below n; inlined, the same draws in the same order
        getrandbits = rng.getrandbits
        stream, occ, words = self.stream_l, self.occ_l, self.words
        lo_, width_, bits_ = self.lo, self.width, self.bits
        n = len(stream) - 1
        nbits = n.bit_length()
        p = getrandbits(nbits)
        while p >= n:
            p = getrandbits(nbits)
        out = []
        append = out.append
        for _ in range(length):
            t = stream[p]
            append(words[t])
            w = width_[t]
            if w <= 0:  # only occurrence is the last token: restart
                p = getrandbits(nbits)
                while p >= n:
                    p = getrandbits(nbits)
                continue
            k = bits_[t]
            r = getrandbits(k)
            while r >= w:
                r = getrandbits(k)
            p = occ[lo_[t] + r] + 1
        return " ".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out")
    ap.add_argument("--dict", default="/usr/share/dictd")
    ap.add_argument("--short", action="store_true",
                    help="short-document mode: bodies at dictionary-entry length (today's default)")
    a = ap.parse_args()
    if a.n < 1 or a.n > 100_000_000:
        sys.exit("N must be in 1..100000000")
    if not os.path.exists(os.path.join(a.dict, "gcide.dict.dz")):
        sys.exit("gen_w3: %s/gcide.dict.dz missing: apt-get install dict-gcide" % a.dict)
    t0 = time.time()
    real = load_gcide(a.dict)
    w2 = W2(a.n, a.seed)
    out = open(a.out, "w") if a.out else sys.stdout
    buf = []

    def emit(i, title, body):
        buf.append('{"id":"%d","title":"%s","body":"%s",%s}\n' % (i, title, body, w2.json_fields(i)))
        if len(buf) >= 5000:
            out.write("".join(buf))
            buf.clear()

    if a.n <= len(real):
        for i in range(a.n):
            title, body = real[i * len(real) // a.n]
            emit(i + 1, title, body)
    else:
        for i, (title, body) in enumerate(real):
            emit(i + 1, title, body)
        chain = Markov([b for _, b in real])
        titles = [t for t, _ in real]
        rng = random.Random(a.seed)
        for i in range(len(real) + 1, a.n + 1):
            h = mix(a.seed ^ (i * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF))
            length = chain.lengths[h % len(chain.lengths)]
            emit(i, titles[(h >> 20) % len(titles)], chain.body(rng, length))
    out.write("".join(buf))
    if a.out:
        out.close()
    print("gen_w3: %d docs (%d GCIDE entries, %d synthetic) seed=%d in %.1fs"
          % (a.n, min(a.n, len(real)), max(0, a.n - len(real)), a.seed, time.time() - t0),
          file=sys.stderr)


if __name__ == "__main__":
    main()
