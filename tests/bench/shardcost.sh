#!/bin/bash
# Server CPU per query of a 5-shard index against a 1-shard one on one
# `shoal --solo` node, same 20,000 W1 documents (issue #25, W6 target:
# 5 shards <= 1.25x the CPU per query of 1 shard). CPU per query = the shoal
# process's utime+stime (/proc/PID/stat) over the queries answered, each W1
# query alone and the mix, CONNS keep-alive connections, both servers up,
# runs alternating. Prints the load average before and after each run.
#
# Usage: tests/bench/shardcost.sh   (not part of the test run)
# Environment: BUILD (default <repo>/build), SHARDS ("1 5"), SECS (3),
#   CONNS (8), TRIALS (1), PORT (27480), QUERIES ("mix 1 2 3 4 5 6 7"),
#   KEEP=1 keeps the temp directory.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
SHARDS="${SHARDS:-1 5}"
SECS="${SECS:-3}"
CONNS="${CONNS:-8}"
TRIALS="${TRIALS:-1}"
PORT="${PORT:-27480}"
QUERIES="${QUERIES:-mix 1 2 3 4 5 6 7}"
TMP=$(mktemp -d /tmp/shoal-shardcost.XXXXXX)
PIDS=""
cleanup() {
	for p in $PIDS; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
	if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

python3 "$HERE/w1_data.py" "$ROOT/cluster-scripts/sample/accounts-es.ndjson" "$TMP/data" >/dev/null
split -l 10000 -d "$TMP/data/bulk.ndjson" "$TMP/data/bulk."
for i in 1 2 3 4 5 6 7; do sed -n "${i}p" "$TMP/data/q_http.ndjson" > "$TMP/data/q$i.ndjson"; done
cp "$TMP/data/q_http.ndjson" "$TMP/data/qmix.ndjson"

declare -A PID_OF PORT_OF
for S in $SHARDS; do
	P=$((PORT + S))
	mkdir -p "$TMP/s$S"
	if curl -s -o /dev/null "http://127.0.0.1:$P/"; then echo "port $P is taken" >&2; exit 1; fi
	"$BUILD/bin/shoal" --solo --data "$TMP/s$S" --http "127.0.0.1:$P" >"$TMP/s$S.log" 2>&1 &
	PID_OF[$S]=$!
	PORT_OF[$S]=$P
	PIDS="$PIDS $!"
	for _ in $(seq 1 200); do curl -sf -o /dev/null "http://127.0.0.1:$P/" && break; sleep 0.1; done
	# the shard request cache off (BENCHMARKS.md rule 2): every query is served
	curl -sf -o /dev/null --retry 0 -X PUT -H 'Content-Type: application/json' \
	    -d "{\"settings\":{\"number_of_shards\":$S,\"number_of_replicas\":0,\"index.requests.cache.enable\":false}}" "http://127.0.0.1:$P/accounts"
	for f in "$TMP"/data/bulk.[0-9]*; do
		curl -sf -o /dev/null -X POST -H 'Content-Type: application/x-ndjson' --data-binary "@$f" \
		    "http://127.0.0.1:$P/_bulk"
	done
	curl -sf -o /dev/null -X POST "http://127.0.0.1:$P/accounts/_refresh"
	curl -sf -o /dev/null -X POST "http://127.0.0.1:$P/accounts/_forcemerge?max_num_segments=1"
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
declare -A USQ
printf '%-5s %6s %9s %10s  %s\n' query shards queries us/query "load before -> after"
for t in $(seq 1 "$TRIALS"); do
	for q in $QUERIES; do
		for S in $SHARDS; do
			l0=$(cut -d' ' -f1-3 /proc/loadavg)
			c0=$(cpu_ticks "${PID_OF[$S]}")
			out=$("$BUILD/bin/loadgen" -p "${PORT_OF[$S]}" -f "$TMP/data/q$q.ndjson" -c "$CONNS" \
			    -d "$SECS" -w 0 --validate none 2>/dev/null)
			c1=$(cpu_ticks "${PID_OF[$S]}")
			n=$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("requests") or d.get("n") or d["count"])')
			us=$(python3 -c "print(round(($c1-$c0)/$HZ*1e6/max($n,1),1))")
			USQ[$q.$S]="${USQ[$q.$S]:-} $us"
			printf '%-5s %6s %9s %10s  %s -> %s\n' "$q" "$S" "$n" "$us" "$l0" "$(cut -d' ' -f1-3 /proc/loadavg)"
		done
	done
done
set -- $SHARDS
if [ $# -ge 2 ]; then
	echo "ratio ($2 shards / $1 shard), median of trials:"
	for q in $QUERIES; do
		python3 -c "
import statistics as s
a=[float(x) for x in '${USQ[$q.$1]}'.split()]; b=[float(x) for x in '${USQ[$q.$2]}'.split()]
print('  %-5s %7.1f -> %7.1f us  x%.2f' % ('$q', s.median(a), s.median(b), s.median(b)/s.median(a)))"
	done
fi
