#!/bin/bash
# W5: in-process engine, one thread: Shoal vs Lucene 10 vs tantivy (Lucene 8.8 and
# Xapian 1.4 as secondary columns), same corpus, same queries, every count checked.
# See w5.py --help.  The peers build on first use (Maven Central, crates.io).
# Usage: tests/bench/w5.sh [N[,N2]] [--corpus w3|w2|short] [--engines E1,E2] [--repeat R] [--trials T] ...
#        (default N = 1,000,000 W3 docs; --corpus short: 126236,926000)
exec python3 "$(dirname "$0")/w5.py" "$@"
