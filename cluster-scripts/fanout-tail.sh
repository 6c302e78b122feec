#!/usr/bin/env bash
# The tail scenario of W4 (docs/fanout.md, "Tail-tolerant fan-out"):
# 3 data nodes, every shard with one replica, a coordinator-only node in
# front, every data node's transport behind build/bin/delay-proxy, and one
# data node (data-1) made slow by its proxy: SLOW_ARGS, by default 10 ms
# added to 10% of its messages and the node stalled for 200 ms every 2 s.
# Every cell: K shards x clients x {no slow node, slow node} x
#   off   cluster.routing.use_adaptive_replica_selection=false, search.hedge.enabled=false
#   ars   selection on, hedging off
#   both  selection on, hedging on
# p50 / p99 / p99.9 by build/bin/loadgen (hit counts validated first), and
# the extra shard requests hedging sent (from the coordinator's
# _nodes/stats). Prints the table; without --quick (and NO_DOC unset) also
# writes docs/fanout-tail.md (keeping its hand-written sections, from
# "## Copy ranking" on) and docs/fanout-tail.png (gnuplot).
#
# Usage: cluster-scripts/fanout-experiment.sh --tail [--quick]
#        (or this script directly)
#   --quick  a smoke run: K=4, 1 client, 200 queries or 1 s a cell, docs untouched
# Environment: BUILD (<repo>/build), KS ("4 16"), CLIENTS ("1 16"),
#   CONFIGS ("off ars both"), N (2000), CELL_SECS (8), DOCS_PER_INDEX (1000),
#   TRIALS (3: every cell once per trial, the table shows medians),
#   SLOW_ARGS, NO_DOC=1, KEEP=1, BASE_PORT (21500).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    --tail) ;;
    *) echo "usage: $0 [--tail] [--quick]" >&2; exit 2 ;;
  esac
done
BUILD="${BUILD:-$ROOT/build}"
KS="${KS-4 16}"
CLIENTS="${CLIENTS:-1 16}"
CONFIGS="${CONFIGS:-off ars both}"
N="${N:-2000}"
CELL_SECS="${CELL_SECS:-8}"
DOCS_PER_INDEX="${DOCS_PER_INDEX:-1000}"
TRIALS="${TRIALS:-3}"
SLOW_ARGS="${SLOW_ARGS:---extra-ms 10 --extra-pct 10 --stall-ms 200 --stall-every-ms 2000}"
BASE_PORT="${BASE_PORT:-21500}"
if [ "$QUICK" = 1 ]; then
  KS="4"; CLIENTS="1"; N=200; CELL_SECS=1; DOCS_PER_INDEX=200; NO_DOC=1; TRIALS=1
fi
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/shoal-tail.XXXXXX)
RES="$TMP/results.tsv"
: > "$RES"
T_START=$(date +%s)
PIDS=()
SLOW_PROXY=""

stop_all() {
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] || continue
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
}
cleanup() {
  stop_all || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
die() { echo "fanout-tail: $*" >&2; exit 1; }

need=""
for b in shoal loadgen delay-proxy; do [ -x "$BUILD/bin/$b" ] || need="$need $b"; done
if [ -n "$need" ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j2 --target $need >/dev/null
fi
SHOAL="$BUILD/bin/shoal"; LOADGEN="$BUILD/bin/loadgen"; PROXY="$BUILD/bin/delay-proxy"
command -v curl >/dev/null || die "curl missing"

# ---- the cluster: data-0..2 behind proxies, coord in front
ND=3
COORD="127.0.0.1:$((BASE_PORT + ND))"
"$PY" - "$TMP/cluster.json" "$ND" "$BASE_PORT" <<'EOF'
import json, sys
path, nd, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nodes = []
for i in range(nd + 1):
    e = {"name": "coord" if i == nd else "data-%d" % i, "http": "127.0.0.1:%d" % (base + i),
         "transport": "127.0.0.1:%d" % (base + 100 + i)}
    if i < nd:
        e["connect"] = "127.0.0.1:%d" % (base + 200 + i)
    else:
        e["roles"] = ["coordinator"]
    nodes.append(e)
json.dump({"cluster_name": "w4-tail", "secret": "w4-tail-secret", "nodes": nodes},
          open(path, "w"), indent=1)
EOF
for ((i = 0; i < ND; i++)); do
  args=()
  # the slow node's impairments start off; SIGUSR2 switches them
  [ "$i" = 1 ] && read -r -a args <<< "$SLOW_ARGS --impair-off"
  "$PROXY" --listen "127.0.0.1:$((BASE_PORT + 200 + i))" --to "127.0.0.1:$((BASE_PORT + 100 + i))" \
    "${args[@]}" >>"$TMP/proxy-$i.log" 2>&1 &
  PIDS+=($!)
  [ "$i" = 1 ] && SLOW_PROXY=$!
done
for ((i = 0; i <= ND; i++)); do
  name="data-$i"; role=()
  if [ "$i" = "$ND" ]; then name=coord; role=(--role coordinator); fi
  mkdir -p "$TMP/$name"
  "$SHOAL" --cluster "$TMP/cluster.json" --name "$name" --data "$TMP/$name" "${role[@]}" \
    --log-level warn >>"$TMP/$name.log" 2>&1 &
  PIDS+=($!)
done
for ((i = 0; i <= ND; i++)); do
  ok=0
  for _ in $(seq 1 300); do
    curl -sf -o /dev/null "http://127.0.0.1:$((BASE_PORT + i))/" && { ok=1; break; }
    sleep 0.1
  done
  [ $ok = 1 ] || { tail -20 "$TMP"/*.log >&2; die "node $i did not answer"; }
done

wait_green() {
  local st=""
  for _ in $(seq 1 300); do
    st=$(curl -s "http://$COORD/_cluster/health/$1" | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("status",""))' 2>/dev/null || true)
    [ "$st" = green ] && return 0
    sleep 0.2
  done
  die "index $1 not green (status '$st')"
}

for k in $KS; do
  idx="k$k"
  # the shard request cache off (BENCHMARKS.md rule 2): every query is served
  curl -sf -X PUT "http://$COORD/$idx" -H 'Content-Type: application/json' \
    -d "{\"settings\":{\"number_of_shards\":$k,\"number_of_replicas\":1,\"index.requests.cache.enable\":false},\"mappings\":{\"properties\":{\"t\":{\"type\":\"keyword\"},\"n\":{\"type\":\"integer\"}}}}" \
    >/dev/null || die "create $idx failed"
  wait_green "$idx"
  "$PY" - "$idx" "$DOCS_PER_INDEX" > "$TMP/bulk-$k.ndjson" <<'EOF'
import json, sys
idx, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    print(json.dumps({"index": {"_index": idx, "_id": str(i)}}))
    print(json.dumps({"t": "w%d" % (i % 10), "n": i}))
EOF
  out=$(curl -s -X POST "http://$COORD/_bulk?refresh=true" -H 'Content-Type: application/x-ndjson' \
    --data-binary @"$TMP/bulk-$k.ndjson")
  [[ $out == *'"errors":false'* ]] || die "bulk into $idx failed: ${out:0:300}"
  curl -sf -X POST "http://$COORD/$idx/_refresh" >/dev/null || die "refresh $idx failed"
  wait_green "$idx"
  "$PY" - "$k" "$DOCS_PER_INDEX" > "$TMP/q-$k.ndjson" <<'EOF'
import json, sys
k, n = sys.argv[1], int(sys.argv[2])
for v in range(10):
    print(json.dumps({"path": "/k%s/_search" % k,
                      "body": {"query": {"term": {"t": "w%d" % v}}, "size": 10},
                      "expect": len(range(v, n, 10))}))
EOF
done

set_config() {  # off | ars | both
  local ars=false hedge=false
  case "$1" in ars) ars=true ;; both) ars=true; hedge=true ;; esac
  curl -sf -X PUT "http://$COORD/_cluster/settings" -H 'Content-Type: application/json' \
    -d "{\"transient\":{\"cluster.routing.use_adaptive_replica_selection\":$ars,\"search.hedge.enabled\":$hedge}}" \
    >/dev/null || die "settings $1 refused"
  sleep 1.2 # taken in on the next monitor round
}
hedge_counts() {  # prints "sent shard_requests" of the coordinator
  curl -s "http://$COORD/_nodes/stats" | "$PY" -c '
import json, sys
for n in json.load(sys.stdin)["nodes"].values():
    if n.get("name") == "coord":
        h = n["shoal"]["hedging"]; print(int(h["sent"]), int(h["shard_requests"]))'
}
SLOW_ON=0
slow() {  # on | off
  local want=0
  [ "$1" = on ] && want=1
  if [ "$want" != "$SLOW_ON" ]; then kill -USR2 "$SLOW_PROXY"; SLOW_ON=$want; sleep 0.5; fi
}

echo "W4 tail: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "slow node data-1: $SLOW_ARGS"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for t in $(seq 1 "$TRIALS"); do
echo "trial $t of $TRIALS: load average $(cut -d' ' -f1-3 /proc/loadavg)"
for k in $KS; do
  for c in $CLIENTS; do
    for s in off on; do
      slow "$s"
      for cfg in $CONFIGS; do
        set_config "$cfg"
        read -r h0 r0 < <(hedge_counts)
        rc=0
        out=$("$LOADGEN" -p "${COORD#*:}" -f "$TMP/q-$k.ndjson" -c "$c" -n "$N" -d "$CELL_SECS" -w 0.3 \
          --label "K=$k c=$c slow=$s $cfg" 2>>"$TMP/loadgen.err") || rc=$?
        read -r h1 r1 < <(hedge_counts)
        if [ -z "$out" ] || [ $rc = 2 ] || [ $rc = 3 ]; then
          tail -2 "$TMP/loadgen.err" >&2
          echo "  K=$k c=$c slow=$s $cfg: loadgen failed (exit $rc); cell left out" >&2
          continue
        fi
        "$PY" - "$k" "$c" "$s" "$cfg" "$out" "$((h1 - h0))" "$((r1 - r0))" >> "$RES" <<'EOF'
import json, sys
k, c, s, cfg, out, hs, rq = sys.argv[1:8]
j = json.loads(out)
print("\t".join([k, c, s, cfg, str(j["requests"]), "%.3f" % (j["p50_us"] / 1000),
                 "%.3f" % (j["p99_us"] / 1000), "%.3f" % (j["p999_us"] / 1000),
                 str(j["errors"]), hs, rq]))
EOF
        tail -1 "$RES" | awk -F'\t' '{printf "  K=%-2s c=%-2s slow=%-3s %-4s n=%-5s p50=%7s p99=%7s p99.9=%7s ms hedges=%s/%s\n",$1,$2,$3,$4,$5,$6,$7,$8,$10,$11}'
      done
    done
  done
done
done
echo "after the last trial: load average $(cut -d' ' -f1-3 /proc/loadavg)"
slow off
T_END=$(date +%s)

# ---- report
TABLE="$TMP/table.md"
"$PY" - "$RES" "$TMP/medians.tsv" > "$TABLE" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
# the trials of a cell: medians of p50, p99, p99.9; requests and hedges summed
by = {}
for r in rows:
    by.setdefault((r[0], r[1], r[2], r[3]), []).append(r)
cell = {}
for key, rs in by.items():
    med = lambda i: "%.3f" % statistics.median(float(x[i]) for x in rs)
    tot = lambda i: str(sum(int(x[i]) for x in rs))
    cell[key] = list(key) + [tot(4), med(5), med(6), med(7), tot(8), tot(9), tot(10)]
with open(sys.argv[2], "w") as f:
    # numeric order for the plot: K, clients, slow, configuration
    for key in sorted(cell, key=lambda k: (int(k[0]), int(k[1]), k[2],
                                           "off ars both".split().index(k[3]))):
        f.write("\t".join(cell[key]) + "\n")
print("| K | clients | config | no slow node p50 / p99 / p99.9 | slow node p50 / p99 / p99.9 "
      "| hedges / shard requests (slow) | n |")
print("|---|---|---|---|---|---|---|")
for key in sorted({(r[0], r[1], r[3]) for r in rows}, key=lambda x: (int(x[0]), int(x[1]),
                                                                   "off ars both".split().index(x[2]))):
    k, c, cfg = key
    a, b = cell.get((k, c, "off", cfg)), cell.get((k, c, "on", cfg))
    f = lambda r: "%s / %s / %s" % (r[5], r[6], r[7]) if r else ""
    extra = "%s / %s" % (b[9], b[10]) if b else ""
    n = min(int(r[4]) for r in (a, b) if r) if (a or b) else 0
    print("| %s | %s | %s | %s | %s | %s | %d |" % (k, c, cfg, f(a), f(b), extra, n))
EOF
echo
cat "$TABLE"
if [ "${NO_DOC:-0}" != 1 ]; then
  if command -v gnuplot >/dev/null; then
    awk -F'\t' '$3=="on"{print $1"/"$2"/"$4, $6, $7, $8}' "$TMP/medians.tsv" > "$TMP/slow.dat"
    awk -F'\t' '$3=="off"{print $1"/"$2"/"$4, $6, $7, $8}' "$TMP/medians.tsv" > "$TMP/fast.dat"
    gnuplot <<EOF || echo "gnuplot failed" >&2
set terminal pngcairo size 1000,500
set output "$ROOT/docs/fanout-tail.png"
set style data histogram
set style histogram clustered
set style fill solid 0.8
set logscale y
set ylabel "ms (log)"
set xtics rotate by -45
set title "tail scenario: p50, p99, p99.9 per cell (K/clients/config), slow node"
plot "$TMP/slow.dat" using 2:xtic(1) title "p50", "" using 3 title "p99", "" using 4 title "p99.9", \
     "$TMP/fast.dat" using 4 title "p99.9 no slow node"
EOF
  else
    echo "(gnuplot missing: apt-get install gnuplot-nox; no plot)"
  fi
  # the hand-written sections (from "## Copy ranking" to the end) are kept as they are
  KEPT=$(sed -n '/^## Copy ranking/,$p' "$ROOT/docs/fanout-tail.md" 2>/dev/null || true)
  {
    echo "# Tail scenario (W4, generated by \`cluster-scripts/fanout-experiment.sh --tail\`)"
    echo
    echo "Commit \`$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')\`, $(nproc) cores, $(date -u +%Y-%m-%d), $((T_END - T_START)) s, load at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Slow node: data-1, delay-proxy \`$SLOW_ARGS\`. Milliseconds, medians of $TRIALS trials (every cell once"
    echo "per trial, configurations alternating); load average at the start: $LOAD0."
    echo
    cat "$TABLE"
    echo
    echo "![fanout-tail](fanout-tail.png)"
    echo
    echo "Rerun: \`TRIALS=$TRIALS KS=\"$KS\" CLIENTS=\"$CLIENTS\" N=$N CELL_SECS=$CELL_SECS DOCS_PER_INDEX=$DOCS_PER_INDEX cluster-scripts/fanout-experiment.sh --tail\`"
    if [ -n "$KEPT" ]; then echo; printf '%s\n' "$KEPT"; fi
  } > "$ROOT/docs/fanout-tail.md"
  echo "wrote docs/fanout-tail.md"
fi
