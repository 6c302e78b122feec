#!/bin/bash
# W4 (../shared/BENCHMARKS.md, docs/fanout.md): shard fan-out latency.
#
# A coordinator-only node in front of data nodes; one tiny index per K
# (K = 1, 2, 4, 8, 16 shards, 0 replicas) so that transport, not search,
# dominates. Every cell: fan-out mode (serial, per_shard, per_node) x clients
# (1, 16), p50/p99 over up to N queries (default 2,000; a cell also stops at
# CELL_SECS, and the table says how many queries it got) with build/bin/loadgen
# (keep-alive HTTP, every query's hit count validated first).
#
#   layouts  2n   K shards over 2 data nodes + coordinator-only node
#            Kn   K shards over K data nodes + coordinator (K = 4, 8; K = 1, 2
#                 coincide with 2n: one shard is on one node either way)
#   delays   0 (loopback), then D = 0.5, 1, 2 ms each way injected by
#            build/bin/delay-proxy in front of every node's transport (the
#            cluster file's `connect` addresses; the kernel has no netem),
#            on the 2n layout
#   sphinx   Sphinx 2.2.11 searchd, distributed index over 2 and 4 agents
#            (agent_persistent, one searchd per agent) on the same tiny
#            documents, queried over SphinxQL by the same loadgen
#   opensearch  OPENSEARCH=1: OpenSearch 3 (tests/bench/peers/opensearch/),
#            a coordinating-only node + 2 data nodes, the same indexes k1..k16
#            and term queries (no fanout parameter: OpenSearch sends one
#            request per shard), in the per_shard columns; loopback, then
#            (unless NO_DELAY=1) the same DELAYS through delay-proxy in front
#            of every node's transport (transport.publish_port = the proxy)
#
#   tail     --tail: the tail scenario instead (cluster-scripts/fanout-tail.sh):
#            3 data nodes with one replica per shard, one of them slowed by its
#            proxy, adaptive selection and hedging off / on; --quick smoke run
#
# Prints the table; writes docs/fanout.md and docs/fanout-*.png (gnuplot).
# Usage: cluster-scripts/fanout-experiment.sh [--tail [--quick]]
# Environment: BUILD (<repo>/build), KS ("1 2 4 8 16"), KN_KS ("4 8"),
#   DELAYS ("0.5 1 2"), MODES ("serial per_shard per_node"), CLIENTS ("1 16"),
#   N (2000), CELL_SECS (8; DELAY_CELL_SECS 4 with injected delay), TIME_BOX
#   (840 s: later cells are skipped and listed), DOCS_PER_INDEX (1000), NO_SPHINX=1, NO_DELAY=1,
#   NO_KN=1, NO_DOC=1 (print only), KEEP=1 (keep the temp dir), BASE_PORT (21000),
#   OPENSEARCH=1 (adds OpenSearch; OS_HEAP per node, default 512m; its nodes
#   answer HTTP on BASE_PORT+400.., transport on BASE_PORT+500.., proxies
#   on BASE_PORT+600..).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  --tail | --quick) exec "$HERE/fanout-tail.sh" "$@" ;;
esac
ROOT="$(cd "$HERE/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
KS="${KS-1 2 4 8 16}"
KN_KS="${KN_KS-4 8}"
DELAYS="${DELAYS-0.5 1 2}"
MODES="${MODES:-serial per_shard per_node}"
CLIENTS="${CLIENTS:-1 16}"
N="${N:-2000}"
CELL_SECS="${CELL_SECS:-8}"
DELAY_CELL_SECS="${DELAY_CELL_SECS:-4}"
TIME_BOX="${TIME_BOX:-840}"   # seconds; cells past it are skipped (listed in the doc)
DOCS_PER_INDEX="${DOCS_PER_INDEX:-1000}"
BASE_PORT="${BASE_PORT:-21000}"
PY=/usr/bin/python3
OPENSEARCH="${OPENSEARCH:-0}"
export OS_HEAP="${OS_HEAP:-512m}"
OS_RUN="$ROOT/tests/bench/peers/opensearch/run.sh"
OS_HTTP=$((BASE_PORT + 400))
OS_DIR=""
export OS_VERSION=""
TMP=$(mktemp -d /tmp/shoal-w4.XXXXXX)
RES="$TMP/results.tsv"
: > "$RES"
T_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

PIDS=()            # shoal nodes and proxies of the current cluster
SPHINX_PIDFILES=()
cleanup() {
  stop_cluster || true
  stop_sphinx || true
  [ -z "$OS_DIR" ] || "$OS_RUN" stop "$OS_DIR" || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

die() { echo "fanout-experiment: $*" >&2; exit 1; }
past_box() { [ $(( $(date +%s) - T_START )) -gt "$TIME_BOX" ]; }

# ---- build what is missing
need=""
for b in shoal loadgen delay-proxy; do [ -x "$BUILD/bin/$b" ] || need="$need $b"; done
if [ -n "$need" ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j2 --target $need >/dev/null
fi
SHOAL="$BUILD/bin/shoal"; LOADGEN="$BUILD/bin/loadgen"; PROXY="$BUILD/bin/delay-proxy"
command -v curl >/dev/null || die "curl missing"

# ---- one cluster: stop_cluster; start_cluster LAYOUT NDATA DELAY
stop_cluster() {
  local p
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] || continue
    kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] || continue
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
}

COORD_HTTP=""
start_cluster() {  # tag ndata delay_ms(0 = no proxy)
  local tag=$1 nd=$2 delay=$3 dir="$TMP/$1" i port
  mkdir -p "$dir"
  port=$BASE_PORT
  # ports: http, transport, proxy per node
  "$PY" - "$dir/cluster.json" "$nd" "$port" "$delay" <<'EOF'
import json, sys
path, nd, base, delay = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
nodes = []
for i in range(nd + 1):
    name = "coord" if i == nd else "data-%d" % i
    e = {"name": name, "http": "127.0.0.1:%d" % (base + i), "transport": "127.0.0.1:%d" % (base + 100 + i)}
    if delay > 0:
        e["connect"] = "127.0.0.1:%d" % (base + 200 + i)
    if i == nd:
        e["roles"] = ["coordinator"]
    nodes.append(e)
json.dump({"cluster_name": "w4", "secret": "w4-secret", "nodes": nodes}, open(path, "w"), indent=1)
EOF
  if [ "$delay" != 0 ]; then
    for ((i = 0; i <= nd; i++)); do
      "$PROXY" --listen "127.0.0.1:$((port + 200 + i))" --to "127.0.0.1:$((port + 100 + i))" \
        --delay-ms "$delay" >>"$dir/proxy-$i.log" 2>&1 &
      PIDS+=($!)
    done
  fi
  for ((i = 0; i <= nd; i++)); do
    local name="data-$i" role=()
    if [ "$i" = "$nd" ]; then name=coord; role=(--role coordinator); fi
    mkdir -p "$dir/$name"
    "$SHOAL" --cluster "$dir/cluster.json" --name "$name" --data "$dir/$name" "${role[@]}" \
      --log-level warn >>"$dir/$name.log" 2>&1 &
    PIDS+=($!)
  done
  COORD_HTTP="127.0.0.1:$((port + nd))"
  for ((i = 0; i <= nd; i++)); do
    local ok=0
    for _ in $(seq 1 300); do
      curl -sf -o /dev/null "http://127.0.0.1:$((port + i))/" && { ok=1; break; }
      sleep 0.1
    done
    [ $ok = 1 ] || { tail -20 "$dir"/*.log >&2; die "node $i of $tag did not answer"; }
  done
}

wait_green() {  # index
  local st=""
  for _ in $(seq 1 300); do
    st=$(curl -s "http://$COORD_HTTP/_cluster/health/$1" | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("status",""))' 2>/dev/null || true)
    [ "$st" = green ] && return 0
    sleep 0.2
  done
  die "index $1 not green (status '$st')"
}

# tiny index kK with K shards: DOCS_PER_INDEX docs, t = "w<i mod 10>", n = i
load_index() {  # K
  local k=$1 idx="k$1" f="$TMP/bulk-$1.ndjson"
  # the shard request cache off (BENCHMARKS.md rule 2): every query is served
  curl -sf -X PUT "http://$COORD_HTTP/$idx" -H 'Content-Type: application/json' \
    -d "{\"settings\":{\"number_of_shards\":$k,\"number_of_replicas\":0,\"index.requests.cache.enable\":false},\"mappings\":{\"properties\":{\"t\":{\"type\":\"keyword\"},\"n\":{\"type\":\"integer\"},\"title\":{\"type\":\"text\"}}}}" \
    >/dev/null || die "create $idx failed"
  wait_green "$idx"
  "$PY" - "$idx" "$DOCS_PER_INDEX" > "$f" <<'EOF'
import json, sys
idx, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    print(json.dumps({"index": {"_index": idx, "_id": str(i)}}))
    print(json.dumps({"t": "w%d" % (i % 10), "n": i, "title": "w%d doc" % (i % 10)}))
EOF
  local out
  out=$(curl -s -X POST "http://$COORD_HTTP/_bulk?refresh=true" -H 'Content-Type: application/x-ndjson' --data-binary @"$f")
  [[ $out == *'"errors":false'* ]] || die "bulk into $idx failed: ${out:0:300}"
  # an explicit refresh too: ?refresh=true through a coordinator did not
  # always make every remote shard's documents visible (loadgen's validation
  # pass checks the counts either way)
  curl -sf -X POST "http://$COORD_HTTP/$idx/_refresh" >/dev/null || die "refresh $idx failed"
}

# query file for index kK and a mode: term on t (DOCS_PER_INDEX/10 hits each)
queries() {  # K mode out
  "$PY" - "$1" "$2" "$DOCS_PER_INDEX" > "$3" <<'EOF'
import json, sys
k, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for v in range(10):
    exp = len(range(v, n, 10))
    # "opensearch": no fanout parameter (OpenSearch rejects unknown ones)
    print(json.dumps({"path": "/k%s/_search" % k + ("" if mode == "opensearch" else "?fanout=%s" % mode),
                      "body": {"query": {"term": {"t": "w%d" % v}}, "size": 10},
                      "expect": exp}))
EOF
}

run_cell() {  # layout K delay mode clients port qfile proto
  local layout=$1 k=$2 d=$3 mode=$4 c=$5 port=$6 qf=$7 proto=${8:-http} out secs=$CELL_SECS
  [ "$d" = 0 ] || secs=$DELAY_CELL_SECS
  if [ $(( $(date +%s) - T_START )) -gt "$TIME_BOX" ]; then
    echo "$layout K=$k D=$d $mode c=$c: skipped (past TIME_BOX=$TIME_BOX s)" >> "$TMP/failed"
    return 0
  fi
  local rc=0
  out=$("$LOADGEN" --proto "$proto" -p "$port" -f "$qf" -c "$c" -n "$N" -d "$secs" -w 0.3 \
    --label "$layout K=$k D=$d $mode c=$c" 2>>"$TMP/loadgen.err") || rc=$?
  # 1 = some requests failed (counted in the table), 3 = wrong hit counts
  if [ -z "$out" ] || [ $rc = 2 ] || [ $rc = 3 ]; then
    tail -2 "$TMP/loadgen.err" >&2
    echo "  $layout K=$k D=$d $mode c=$c: loadgen failed (exit $rc); cell left out" >&2
    echo "$layout K=$k D=$d $mode c=$c: loadgen exit $rc" >> "$TMP/failed"
    return 0
  fi
  "$PY" - "$layout" "$k" "$d" "$mode" "$c" "$out" >> "$RES" <<'EOF'
import json, sys
layout, k, d, mode, c, out = sys.argv[1:7]
j = json.loads(out)
print("\t".join([layout, k, d, mode, c, str(j["requests"]), "%.3f" % (j["p50_us"] / 1000),
                 "%.3f" % (j["p99_us"] / 1000), "%.0f" % j["qps"], "%.2f" % j["driver_cpu_s"],
                 str(j["errors"])]))
EOF
  tail -1 "$RES" | awk -F'\t' '{printf "  %-4s K=%-2s D=%-3s %-9s c=%-2s n=%-5s p50=%7s ms p99=%7s ms qps=%s\n",$1,$2,$3,$4,$5,$6,$7,$8,$9}'
}

measure_cluster() {  # layout delay K...
  local layout=$1 d=$2; shift 2
  local k mode c qf port=${COORD_HTTP#*:}
  for k in "$@"; do
    for mode in $MODES; do
      qf="$TMP/q-$k-$mode.ndjson"
      queries "$k" "$mode" "$qf"
      for c in $CLIENTS; do run_cell "$layout" "$k" "$d" "$mode" "$c" "$port" "$qf"; done
    done
  done
}

# ---- Sphinx: 4 agent searchd (shard daemons) + a coordinator searchd with
# dist2 (agents 0,1 over a 2-way split) and dist4 (agents 0..3, 4-way split)
SPHINX_SQL=$((BASE_PORT + 306))
stop_sphinx() {
  local f
  for f in "${SPHINX_PIDFILES[@]:-}"; do
    [ -n "$f" ] && [ -s "$f" ] || continue
    local p; p=$(cat "$f")
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  SPHINX_PIDFILES=()
}

run_sphinx() {
  command -v searchd >/dev/null && command -v indexer >/dev/null || {
    echo "  (sphinxsearch not installed: apt-get install sphinxsearch; skipped)"; return 0; }
  local S="$TMP/sphinx" k
  mkdir -p "$S/data" "$S/log"
  "$PY" - "$DOCS_PER_INDEX" "$S" <<'EOF'
import sys
n, s = int(sys.argv[1]), sys.argv[2]
# Sphinx ids start at 1; same documents as the Shoal indexes
rows = ["%d\tw%d doc\tw%d\t%d\n" % (i + 1, i % 10, i % 10, i) for i in range(n)]
open(s + "/all.tsv", "w").writelines(rows)
for parts in (2, 4):
    for p in range(parts):
        open("%s/s%d_%d.tsv" % (s, parts, p), "w").writelines(r for i, r in enumerate(rows) if i % parts == p)
EOF
  idx_block() {  # name tsv
    printf 'source src_%s\n{\n\ttype = tsvpipe\n\ttsvpipe_command = cat %s\n\ttsvpipe_field = title\n\ttsvpipe_attr_string = t\n\ttsvpipe_attr_uint = n\n}\n' "$1" "$2"
    printf 'index %s\n{\n\tsource = src_%s\n\tpath = %s/data/%s\n\tdocinfo = extern\n\tdict = keywords\n\tmin_word_len = 1\n\tmorphology = none\n}\n' "$1" "$1" "$S" "$1"
  }
  searchd_block() {  # api sql tag
    printf 'searchd\n{\n\tlisten = 127.0.0.1:%s\n\tlisten = 127.0.0.1:%s:mysql41\n\tlog = %s/log/%s.log\n\tquery_log = %s/log/%s.query.log\n\tpid_file = %s/%s.pid\n\tbinlog_path =\n\tworkers = threads\n\tmax_children = 64\n\tpersistent_connections_limit = 32\n\tdist_threads = 4\n\tread_timeout = 5\n\tclient_timeout = 300\n\tpreopen_indexes = 1\n\tlisten_backlog = 128\n\tagent_connect_timeout = 1000\n\tagent_query_timeout = 3000\n}\nindexer\n{\n\tmem_limit = 64M\n}\n' \
      "$1" "$2" "$S" "$3" "$S" "$3" "$S" "$3"
  }
  # agent k serves s4_k and (k < 2) s2_k
  for k in 0 1 2 3; do
    {
      idx_block "s4_$k" "$S/s4_$k.tsv"
      [ $k -ge 2 ] || idx_block "s2_$k" "$S/s2_$k.tsv"
      searchd_block $((BASE_PORT + 320 + k)) $((BASE_PORT + 340 + k)) "agent$k"
    } > "$S/agent$k.conf"
    indexer --config "$S/agent$k.conf" --all --quiet >/dev/null || die "sphinx indexer failed"
  done
  {
    echo "index dist2"; echo "{"; echo "	type = distributed"
    for k in 0 1; do echo "	agent_persistent = 127.0.0.1:$((BASE_PORT + 320 + k)):s2_$k"; done
    echo "}"
    echo "index dist4"; echo "{"; echo "	type = distributed"
    for k in 0 1 2 3; do echo "	agent_persistent = 127.0.0.1:$((BASE_PORT + 320 + k)):s4_$k"; done
    echo "}"
    searchd_block $((BASE_PORT + 312)) "$SPHINX_SQL" coord
  } > "$S/coord.conf"
  for k in 0 1 2 3 coord; do
    local tag=$k; [ "$k" = coord ] || tag="agent$k"
    searchd --config "$S/$tag.conf" > "$S/log/$tag.start" 2>&1 || { cat "$S/log/$tag.start" >&2; die "searchd $tag failed"; }
    SPHINX_PIDFILES+=("$S/$tag.pid")
  done
  for _ in $(seq 1 50); do
    mysql -h127.0.0.1 -P"$SPHINX_SQL" -e 'SHOW STATUS LIKE "uptime"' >/dev/null 2>&1 && break
    sleep 0.1
  done
  local a c
  for a in 2 4; do
    "$PY" - "$a" "$DOCS_PER_INDEX" > "$S/q$a.ndjson" <<'EOF'
import json, sys
a, n = sys.argv[1], int(sys.argv[2])
for v in range(10):
    print(json.dumps({"sql": "SELECT id FROM dist%s WHERE MATCH('w%d') LIMIT 10; SHOW META" % (a, v),
                      "expect": len(range(v, n, 10))}))
EOF
    for c in $CLIENTS; do run_cell sphinx "$a" 0 "agents" "$c" "$SPHINX_SQL" "$S/q$a.ndjson" mysql; done
  done
  stop_sphinx
}

# ---- OpenSearch 3: a coordinating-only node (node-0) + 2 data nodes
run_opensearch() {  # delay_ms (0: no proxy)
  local d=$1 k c qf i pub=()
  OS_VERSION=$("$OS_RUN" version)
  OS_DIR="$TMP/opensearch-d$d"
  mkdir -p "$OS_DIR"
  if [ "$d" != 0 ]; then
    # every node tells the others to connect to its proxy (transport.publish_port)
    for i in 0 1 2; do
      "$PROXY" --listen "127.0.0.1:$((BASE_PORT + 600 + i))" --to "127.0.0.1:$((BASE_PORT + 500 + i))" \
        --delay-ms "$d" >>"$OS_DIR/proxy-$i.log" 2>&1 &
      PIDS+=($!)
    done
    pub=(PUBLISH_BASE=$((BASE_PORT + 600)))
  fi
  env "${pub[@]}" TRANSPORT_BASE=$((BASE_PORT + 500)) "$OS_RUN" start "$OS_HTTP" "$OS_DIR" --nodes 3 --coordinator >/dev/null \
    || die "OpenSearch did not start"
  COORD_HTTP="127.0.0.1:$OS_HTTP"
  for k in $KS; do load_index "$k"; done
  for k in $KS; do
    qf="$TMP/q-$k-opensearch.ndjson"
    queries "$k" opensearch "$qf"
    for c in $CLIENTS; do run_cell opensearch "$k" "$d" per_shard "$c" "$OS_HTTP" "$qf"; done
  done
  "$OS_RUN" stop "$OS_DIR"
  OS_DIR=""
  stop_cluster  # the proxies
}

# ---------------------------------------------------------------- the run
echo "W4 fan-out: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== 2 data nodes + coordinator, loopback"
start_cluster two 2 0
for k in $KS; do load_index "$k"; done
measure_cluster 2n 0 $KS
stop_cluster

if [ "${NO_SPHINX:-0}" != 1 ]; then
  echo "== Sphinx 2.2 distributed index, agent_persistent"
  run_sphinx
fi

if [ "$OPENSEARCH" = 1 ]; then
  echo "== OpenSearch $("$OS_RUN" version): coordinating-only node + 2 data nodes (heap $OS_HEAP each), loopback"
  run_opensearch 0
fi


if [ "${NO_DELAY:-0}" != 1 ]; then
  for d in $DELAYS; do
    past_box && { echo "D=$d: skipped (past TIME_BOX=$TIME_BOX s)" >> "$TMP/failed"; continue; }
    echo "== 2 data nodes + coordinator, delay-proxy $d ms each way on every transport"
    start_cluster "two-d$d" 2 "$d"
    for k in $KS; do load_index "$k"; done
    measure_cluster 2n "$d" $KS
    stop_cluster
    if [ "$OPENSEARCH" = 1 ] && ! past_box; then
      echo "== OpenSearch: coordinating-only node + 2 data nodes, delay-proxy $d ms each way on every transport"
      run_opensearch "$d"
    fi
  done
fi
if [ "${NO_KN:-0}" != 1 ]; then
  for k in $KN_KS; do
    past_box && { echo "== $k data nodes: skipped (time box)"; echo "Kn K=$k: skipped (past TIME_BOX=$TIME_BOX s)" >> "$TMP/failed"; continue; }
    echo "== $k data nodes + coordinator, loopback"
    start_cluster "kn$k" "$k" 0
    load_index "$k"
    measure_cluster Kn 0 "$k"
    stop_cluster
  done
fi
T_END=$(date +%s)

# ---------------------------------------------------------------- report
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
export COMMIT T_START T_END N CELL_SECS DELAY_CELL_SECS DOCS_PER_INDEX
OUTDIR="$TMP/out"; mkdir -p "$OUTDIR"
"$PY" - "$RES" "$OUTDIR" <<'EOF'
import os, sys, collections
res, out = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split("\t") for l in open(res) if l.strip()]
cell = {}
for r in rows:
    layout, k, d, mode, c, n, p50, p99, qps, cpu, err = r
    cell[(layout, int(k), float(d), mode, int(c))] = dict(n=int(n), p50=float(p50), p99=float(p99), qps=float(qps), cpu=float(cpu), err=int(err))
modes = ["serial", "per_shard", "per_node"]
clients = sorted({int(r[4]) for r in rows})
def fmt(x):
    return "—" if x is None else ("%.2f" % x if x < 10 else "%.1f" % x)
lines = []
head = "| layout | D ms | K | " + " | ".join("%s c=%d p50 / p99" % (m, c) for c in clients for m in modes) + " | min n |"
lines.append(head)
lines.append("|" + "---|" * (head.count("|") - 1))
keys = sorted({(l, d, k) for (l, k, d, m, c) in cell if l not in ("sphinx", "opensearch")}, key=lambda x: (x[1], x[0] != "2n", x[2]))
for (l, d, k) in keys:
    cols, ns = [], []
    for c in clients:
        for m in modes:
            v = cell.get((l, k, d, m, c))
            cols.append("%s / %s" % (fmt(v["p50"]), fmt(v["p99"])) if v else "—")
            if v:
                ns.append(v["n"])
    lines.append("| %s | %s | %d | %s | %s |" % ("2 data nodes" if l == "2n" else "K data nodes", "%g" % d, k, " | ".join(cols), min(ns) if ns else "—"))
for a in (2, 4):
    cols, ns = [], []
    for c in clients:
        v = cell.get(("sphinx", a, 0.0, "agents", c))
        for m in modes:
            cols.append(("%s / %s" % (fmt(v["p50"]), fmt(v["p99"])) if v else "—") if m == "per_node" else "")
        if v:
            ns.append(v["n"])
    lines.append("| Sphinx %d agents | 0 | %d | %s | %s |" % (a, a, " | ".join(cols), min(ns) if ns else "—"))
for d, k in sorted({(d, k) for (l, k, d, m, c) in cell if l == "opensearch"}):
    cols, ns = [], []
    for c in clients:
        v = cell.get(("opensearch", k, d, "per_shard", c))
        for m in modes:
            cols.append(("%s / %s" % (fmt(v["p50"]), fmt(v["p99"])) if v else "—") if m == "per_shard" else "")
        if v:
            ns.append(v["n"])
    lines.append("| OpenSearch %s, coordinating-only + 2 data nodes | %g | %d | %s | %s |" % (
        os.environ.get("OS_VERSION", "3"), d, k, " | ".join(cols), min(ns) if ns else "—"))
table = "\n".join(lines)

def g(l, k, d, m, c=1, f="p50"):
    v = cell.get((l, k, d, m, c))
    return v[f] if v else None
def ratio(a, b):
    return a / b if a and b else None
t = []
def tgt(name, val, ok, target):
    t.append("| %s | %s | %s | %s |" % (name, "—" if val is None else val, target, "—" if ok is None else ("met" if ok else "**missed**")))
r = ratio(g("2n", 16, 0.0, "per_shard"), g("2n", 2, 0.0, "per_shard"))
tgt("loopback, per_shard p50 16 shards / 2 shards (1 client)", r and "%.2f×" % r, r and r <= 1.25, "≤ 1.25×")
r2 = ratio(g("2n", 16, 0.0, "per_node"), g("2n", 2, 0.0, "per_node"))
tgt("loopback, per_node p50 16 shards / 2 shards (1 client)", r2 and "%.2f×" % r2, r2 and r2 <= 1.25, "≤ 1.25×")
p16 = g("2n", 16, 0.0, "per_shard"); sp2 = g("sphinx", 2, 0.0, "agents")
tgt("loopback, per_shard p50 at 16 shards", p16 and "%.3f ms" % p16, p16 and p16 < 0.49, "< 0.49 ms")
tgt("loopback, per_shard p50 at 16 shards vs Sphinx 2 agents p50 (%s ms)" % (fmt(sp2)), p16 and sp2 and "%.2f×" % (p16 / sp2), (p16 < sp2) if p16 and sp2 else None, "< 1×")
r3 = ratio(g("2n", 16, 1.0, "per_shard"), g("2n", 2, 1.0, "per_shard"))
tgt("D = 1 ms, per_shard p50 16 shards / 2 shards", r3 and "%.3f×" % r3, r3 and r3 <= 1.3, "≤ 1.3×")
r4 = ratio(g("2n", 16, 1.0, "serial"), g("2n", 2, 1.0, "serial"))
tgt("D = 1 ms, serial p50 16 shards / 2 shards", r4 and "%.2f×" % r4, r4 and r4 >= 8, "≥ 8×")
targets = "| target (BENCHMARKS.md W4) | measured | target | |\n|---|---|---|---|\n" + "\n".join(t)
open(out + "/table.md", "w").write(table + "\n")
open(out + "/targets.md", "w").write(targets + "\n")
print(table)
print()
print(targets)

# gnuplot data: one file per series, "K p50 p99"
def series(name, l, d, m, c):
    pts = sorted((k, v) for (ll, k, dd, mm, cc), v in cell.items() if ll == l and dd == d and mm == m and cc == c)
    with open("%s/%s.dat" % (out, name), "w") as f:
        for k, v in pts:
            f.write("%d %.4f %.4f\n" % (k, v["p50"], v["p99"]))
ds = sorted({d for (l, k, d, m, c) in cell if l == "2n"})
for c in clients:
    for m in modes:
        for d in ds:
            series("2n-%g-%s-c%d" % (d, m, c), "2n", d, m, c)
        series("kn-0-%s-c%d" % (m, c), "Kn", 0.0, m, c)
    series("sphinx-c%d" % c, "sphinx", 0.0, "agents", c)
    series("opensearch-c%d" % c, "opensearch", 0.0, "per_shard", c)
    for d in ds:
        if d:
            series("opensearch-%g-c%d" % (d, c), "opensearch", d, "per_shard", c)
open(out + "/delays", "w").write(" ".join("%g" % d for d in ds))
EOF

PLOTS=""
if command -v gnuplot >/dev/null; then
  DELAYS_DONE=$(cat "$OUTDIR/delays")
  (
    cd "$OUTDIR"
    common='set terminal pngcairo size 960,600 font "DejaVu Sans,11"; set termoption noenhanced; set logscale x 2; set xtics (1,2,4,8,16); set xrange [0.8:20]; set grid; set key top left box opaque; set xlabel "shards (K)"'
    ex() { [ -s "$1" ]; }
    col() { case $1 in serial) echo "#d62728";; per_shard) echo "#1f77b4";; per_node) echo "#2ca02c";; esac; }
    # 1: loopback, 1 client, p50
    {
      echo "$common; set output 'fanout-loopback.png'; set title 'W4 loopback: p50 latency, 1 client, coordinator-only node in front'; set ylabel 'p50 ms'; set yrange [0:*]"
      p="plot"
      for m in serial per_shard per_node; do
        ex "2n-0-$m-c1.dat" && { echo "$p '2n-0-$m-c1.dat' u 1:2 w lp lw 2 pt 7 lc rgb '$(col $m)' t '$m, 2 data nodes' \\"; p=","; }
        ex "kn-0-$m-c1.dat" && { echo "$p 'kn-0-$m-c1.dat' u 1:2 w lp dt 2 lw 2 pt 6 ps 1.5 lc rgb '$(col $m)' t '$m, K data nodes' \\"; p=","; }
      done
      ex opensearch-c1.dat && { echo "$p 'opensearch-c1.dat' u 1:2 w lp lw 2 pt 9 lc rgb '#8c564b' t 'OpenSearch $OS_VERSION, coordinating-only + 2 data nodes' \\"; p=","; }
      ex sphinx-c1.dat && echo "$p 'sphinx-c1.dat' u 1:2 w lp lw 2 pt 5 lc rgb 'black' t 'Sphinx 2.2, agent_persistent (K agents)' \\"
      echo ""
    } > loop.gp
    gnuplot loop.gp
    # 2: injected delay, 1 client, p50, log y; colour = D, dashed = serial
    {
      echo "$common; set terminal pngcairo size 1150,600 font 'DejaVu Sans,11'; set key outside right top box; set output 'fanout-delay.png'; set title 'W4 with D injected each way on every link, 2 data nodes, 1 client (dashed: serial, solid: per_shard, dotted: per_node)'; set ylabel 'p50 ms (log scale)'; set logscale y"
      p="plot"; i=0
      dcols=("#7f7f7f" "#1f77b4" "#ff7f0e" "#d62728" "#9467bd")
      for d in $DELAYS_DONE; do
        for m in serial per_shard per_node; do
          ex "2n-$d-$m-c1.dat" || continue
          case $m in serial) st="dt 2 pt 7";; per_shard) st="dt 1 pt 7";; per_node) st="dt 3 pt 6";; esac
          echo "$p '2n-$d-$m-c1.dat' u 1:2 w lp lw 2 $st lc rgb '${dcols[$i]}' t '$m, D=$d ms' \\"; p=","
        done
        i=$(( (i + 1) % 5 ))
      done
      echo ""
    } > delay.gp
    gnuplot delay.gp
    # 3: 16 clients, loopback, p50 and p99
    {
      echo "$common; set output 'fanout-16clients.png'; set title 'W4 loopback, 16 clients, 2 data nodes: p50 (solid) and p99 (dashed)'; set ylabel 'ms'; set yrange [0:*]"
      p="plot"
      for m in serial per_shard per_node; do
        ex "2n-0-$m-c16.dat" || continue
        echo "$p '2n-0-$m-c16.dat' u 1:2 w lp lw 2 pt 7 lc rgb '$(col $m)' t '$m p50' \\"; p=","
        echo "$p '2n-0-$m-c16.dat' u 1:3 w lp dt 2 lw 2 pt 6 lc rgb '$(col $m)' t '$m p99' \\"
      done
      ex sphinx-c16.dat && echo "$p 'sphinx-c16.dat' u 1:2 w lp lw 2 pt 5 lc rgb 'black' t 'Sphinx p50' \\"
      echo ""
    } > c16.gp
    gnuplot c16.gp
  ) || echo "gnuplot failed (see $OUTDIR/*.gp)" >&2
  PLOTS="fanout-loopback.png fanout-delay.png fanout-16clients.png"
else
  echo "(gnuplot missing: apt-get install gnuplot-nox; no plots)"
fi

if [ "${NO_DOC:-0}" != 1 ]; then
  for p in $PLOTS; do [ -s "$OUTDIR/$p" ] && cp "$OUTDIR/$p" "$ROOT/docs/$p"; done
  # the hand-written tail section (the last one) is kept as it is
  TAIL_SECTION=$(sed -n '/^## Tail-tolerant fan-out/,$p' "$ROOT/docs/fanout.md" 2>/dev/null || true)
  {
    cat <<EOF
# Shard fan-out (W4)

How search latency grows with the number of shards, with the shard requests
sent one after another (\`fanout=serial\`), all at once with one message per
shard (\`fanout=per_shard\`, the default) and all at once with one message per
node (\`fanout=per_node\`, merged on the data node). Workload W4 of
\`../shared/BENCHMARKS.md\`; written by \`cluster-scripts/fanout-experiment.sh\`.

## Setup

- Commit \`$COMMIT\`, $(nproc) cores shared by the nodes, the proxies and the
  driver (no pinning: 2 cores), $(uname -sr), run took $((T_END - T_START)) s
  on $(date -u +%Y-%m-%d). Load average at the start: $LOAD_START; at the end:
  $(cut -d' ' -f1-3 /proc/loadavg) (the run's own nodes, proxies and driver).
- One coordinator-only node (\`--role coordinator\`, holds no data) in front
  of data nodes; every request goes to the coordinator, so every shard is
  remote (a real network hop over nng on loopback).
- One index per K (\`k1\` ... \`k16\`), K shards, 0 replicas, $DOCS_PER_INDEX
  tiny documents (\`t\` keyword, \`n\` integer, \`title\` text), so transport
  dominates, not search.
- Queries: ten \`term\` queries on \`t\` (size 10), each matching exactly
  $((DOCS_PER_INDEX / 10)) documents; \`build/bin/loadgen\` validates every
  query's hit count before timing, keeps connections alive, warms up 0.3 s,
  then measures up to $N queries per cell or $CELL_SECS s ($DELAY_CELL_SECS s with
  injected delay), whichever comes
  first (the "min n" column gives the smallest count behind a row; slow
  serial cells with injected delay are time-bounded). No result cache exists
  in Shoal; Sphinx 2.2.11 has none either.
- Delay: \`build/bin/delay-proxy --listen CONNECT --to TRANSPORT --delay-ms D\`
  in front of every node's transport, D each way (2D per round trip); the
  cluster file's \`connect\` address points the other nodes at the proxy.
- Sphinx 2.2.11: four agent \`searchd\` processes and one coordinator
  \`searchd\`; \`dist2\` = 2 \`agent_persistent\` agents over a 2-way split
  of the same documents, \`dist4\` = 4 agents over a 4-way split; queried
  with \`SELECT id FROM distA WHERE MATCH('wV') LIMIT 10; SHOW META\` over
  SphinxQL by the same loadgen (hit counts validated from \`total_found\`).
  Its rows sit in the per_node columns (one request per agent).
EOF
    [ -z "$OS_VERSION" ] || cat <<EOF
- OpenSearch $OS_VERSION (\`tests/bench/peers/opensearch/run.sh start PORT DIR
  --nodes 3 --coordinator\`): a coordinating-only node (\`node.roles: []\`) in
  front of 2 data nodes, one JVM each, heap $OS_HEAP each, request and query
  caches off; the same indexes, documents and queries over HTTP, without the
  \`fanout\` parameter (OpenSearch sends one request per shard, at most 5 at
  once per node by default); its rows sit in the per_shard columns. With
  injected delay, the same proxies in front of every node's transport, which
  each node publishes as its address (\`transport.publish_port\`).
EOF
    cat <<EOF

## Results (milliseconds, p50 / p99)

EOF
    cat "$OUTDIR/table.md"
    echo
    if [ -s "$TMP/failed" ]; then
      echo "Cells left out (loadgen exit 2 = no reply within 30 s, 3 = wrong hit counts; or past the time box):"
      echo
      sed 's/^/- /' "$TMP/failed"
      echo
    fi
    echo "## Against the targets"
    echo
    cat "$OUTDIR/targets.md"
    echo
    echo "## Plots"
    echo
    for p in $PLOTS; do echo "![${p%.png}]($p)"; echo; done
    cat <<EOF
## Rerun

\`\`\`sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 --target shoal loadgen delay-proxy
apt-get install -y --no-install-recommends sphinxsearch gnuplot-nox   # Sphinx and the plots
cluster-scripts/fanout-experiment.sh
# OpenSearch 3 beside it (Maven, Java 21+; about 2.5 GB for its three JVMs):
#   OPENSEARCH=1 OS_HEAP=512m TIME_BOX=1500 cluster-scripts/fanout-experiment.sh
# this run: $([ "$OPENSEARCH" = 1 ] && echo "OPENSEARCH=1 OS_HEAP=$OS_HEAP ")KS="$KS" KN_KS="$KN_KS" DELAYS="$DELAYS" MODES="$MODES" CLIENTS="$CLIENTS" N=$N CELL_SECS=$CELL_SECS DELAY_CELL_SECS=$DELAY_CELL_SECS DOCS_PER_INDEX=$DOCS_PER_INDEX
\`\`\`

One cell by hand (what the script does for K = 4, D = 1 ms):

\`\`\`sh
build/bin/delay-proxy --listen 127.0.0.1:21200 --to 127.0.0.1:21100 --delay-ms 1 &   # one per node
build/bin/shoal --cluster cluster.json --name data-0 --data /tmp/d0 &                 # "connect": "127.0.0.1:21200"
build/bin/shoal --cluster cluster.json --name coord --role coordinator --data /tmp/dc &
build/bin/loadgen -p 21002 -f q.ndjson -c 1 -n $N -d $CELL_SECS -w 0.3   # q.ndjson: {"path":"/k4/_search?fanout=serial","body":{...},"expect":100}
\`\`\`
EOF
    [ -z "$TAIL_SECTION" ] || printf '\n%s\n' "$TAIL_SECTION"
  } > "$ROOT/docs/fanout.md"
  echo "wrote docs/fanout.md ${PLOTS:+and docs/{${PLOTS// /,}}}"
fi
[ -z "${KEEP:-}" ] || cp "$RES" "$TMP/out/"
