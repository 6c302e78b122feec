#!/bin/bash
# W1 before/after: two builds of shoal serve the same W1 data (1 shard,
# force-merged) in turn, TRIALS (3) trials of SECS (8) s each at CONNS (16)
# connections, alternating; prints qps, p99, server CPU per query and the
# load average around each trial. Run alone on the machine.
# Usage: tests/bench/ab_w1.sh BASE_BUILD NEW_BUILD   (build dirs with bin/shoal, bin/loadgen)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BASE="$1"; NEW="$2"
TRIALS="${TRIALS:-3}"; SECS="${SECS:-8}"; CONNS="${CONNS:-16}"; PORT="${PORT:-19299}"
TMP=$(mktemp -d /tmp/shoal-abw1.XXXXXX); trap 'rm -rf "$TMP"' EXIT
python3 "$HERE/w1_data.py" "$ROOT/cluster-scripts/sample/accounts-es.ndjson" "$TMP/data" >/dev/null
serve() { "$1/bin/shoal" --solo --data "$TMP/d" --http "127.0.0.1:$PORT" >>"$TMP/log" 2>&1 & PID=$!
  for _ in $(seq 100); do curl -sf -o /dev/null "127.0.0.1:$PORT/" && return; sleep 0.1; done; exit 1; }
serve "$BASE"
# the shard request cache off: no result cache answers a query (BENCHMARKS.md rule 2)
curl -sf -XPUT "127.0.0.1:$PORT/accounts" -H 'Content-Type: application/json' \
  -d '{"settings":{"number_of_shards":1,"number_of_replicas":0,"index.requests.cache.enable":false}}' >/dev/null
split -l 10000 -d "$TMP/data/bulk.ndjson" "$TMP/data/bulk."
for f in "$TMP"/data/bulk.[0-9]*; do
  curl -sf -XPOST "127.0.0.1:$PORT/_bulk" -H 'Content-Type: application/x-ndjson' --data-binary "@$f" >/dev/null
done
curl -sf -XPOST "127.0.0.1:$PORT/accounts/_refresh" >/dev/null
curl -sf -XPOST "127.0.0.1:$PORT/accounts/_forcemerge?max_num_segments=1" >/dev/null
kill "$PID"; wait "$PID" 2>/dev/null || true
for t in $(seq "$TRIALS"); do
  for which in base new; do
    b=$BASE; [ $which = new ] && b=$NEW
    serve "$b"
    l0=$(cut -d' ' -f1-3 /proc/loadavg)
    c0=$(awk '{print $14+$15}' "/proc/$PID/stat")
    out=$("$b/bin/loadgen" -p "$PORT" -f "$TMP/data/q_http.ndjson" -c "$CONNS" -d "$SECS" -w 1 --label "$which $t" 2>/dev/null)
    c1=$(awk '{print $14+$15}' "/proc/$PID/stat")
    python3 - "$which" "$t" "$out" "$c0" "$c1" "$l0" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, os, sys
w, t, out, c0, c1, l0, l1 = sys.argv[1:]
j = json.loads(out)
hz = os.sysconf("SC_CLK_TCK")
# the CPU of the warm-up second counts too: per query, an upper bound
print("%-4s trial %s: %8.0f qps  p99 %6.2f ms  server CPU %5.0f us/query  errors %d  load %s -> %s"
      % (w, t, j["qps"], j["p99_us"] / 1000, (int(c1) - int(c0)) / hz * 1e6 / max(1, j["requests"]),
         j["errors"] + j.get("validation_failures", 0), l0, l1))
PY
    kill "$PID"; wait "$PID" 2>/dev/null || true
  done
done
