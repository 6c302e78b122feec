#!/usr/bin/env bash
# Fault scenarios with every node and etcd member in its own network
# namespace (tests/faults/faults.py): root, iproute2 and iptables.
#   tests/faults/run.sh [--seed S] [--secs N] [--scenarios P1,...,P8] [--keep]
# The short run in the default tests is tests/api/test_faults.py.
#   tests/faults/run.sh --rows [RUNS]
# runs the replication rows R0-R8 (static cluster and on etcd), the
# live-cluster rows M1-M7 and M8 (replica counts) with every node and etcd
# member in its own namespace (SHOAL_NETNS=1; partitions by iptables),
# RUNS times each (default 1); exits nonzero if any suite run failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/bin/shoal ] || cmake --build build -j"$(nproc)" --target shoal >/dev/null
if [ "${1:-}" = "--rows" ]; then
	runs=${2:-1}
	failed=0
	for i in $(seq "$runs"); do
		for t in test_replication test_replication_etcd test_live_cluster test_replica_count; do
			echo "== $t in namespaces, run $i of $runs"
			SHOAL_NETNS=1 python3 "tests/api/$t.py" || failed=$((failed + 1))
		done
	done
	echo "$failed suite run(s) failed"
	[ "$failed" -eq 0 ]
	exit
fi
exec python3 tests/faults/faults.py "$@"
