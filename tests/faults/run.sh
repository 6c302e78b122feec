#!/usr/bin/env bash
# Fault scenarios with every node and etcd member in its own network
# namespace (tests/faults/faults.py): root, iproute2 and iptables.
#   tests/faults/run.sh [--seed S] [--secs N] [--scenarios P1,...,P8] [--keep]
# The short run in the default tests is tests/api/test_faults.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/bin/shoal ] || cmake --build build -j"$(nproc)" --target shoal >/dev/null
exec python3 tests/faults/faults.py "$@"
