#!/bin/bash
# Indexing benchmark (W2, W3): Shoal vs Lucene 8.8 vs Sphinx indexer. See index_bench.py --help.
# Usage: tests/bench/index_bench.sh [N] [--w3 N3] [--trials T] ...   (default N = 1,000,000)
exec python3 "$(dirname "$0")/index_bench.py" "$@"
