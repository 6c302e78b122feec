#!/bin/bash
# W5: in-process engine, one thread: Shoal vs Lucene 8.8 vs Xapian 1.4. See w5.py --help.
# Usage: tests/bench/w5.sh [N] [--repeat R] [--trials T] ...   (default N = 1,000,000 W3 docs)
exec python3 "$(dirname "$0")/w5.py" "$@"
