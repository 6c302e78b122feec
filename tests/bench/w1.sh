#!/bin/bash
# W1 (docs/benchmarks.md): the accounts mix at 16 keep-alive connections on
# one `shoal --solo` node (1 shard, then 5), and the same seven queries on
# Sphinx 2.2 searchd over the same 20,000 documents (SphinxQL), in one run;
# with OPENSEARCH=1 also on one OpenSearch 3 node per shard count (same
# documents, same HTTP queries, the same exact counts checked), started by
# tests/bench/peers/opensearch/run.sh from Maven Central's artifacts.
#
# Usage: tests/bench/w1.sh            (from anywhere; not part of the test run)
# Environment: BUILD (default <repo>/build), SHARDS ("1 5"), TRIALS (3),
#   SECS (8), CONNS (16), PORT (19280), SPHINX_PORT (19406), PIN=1 to pin the
#   server to CPU 0 and the driver to CPU 1 (halves the server on 2 cores),
#   NO_SPHINX=1, NO_DOC=1 (print only, don't touch docs/benchmarks.md),
#   KEEP=1 keeps the temp directory.
#   OPENSEARCH=1 adds OpenSearch: OS_SHARDS (default SHARDS), OS_PORT (19500;
#   node for S shards on OS_PORT+S, transport OS_PORT+100+S), OS_HEAP (1g per
#   node, -Xms = -Xmx). Each OpenSearch node is one JVM of about heap + 0.3 GB.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
SHARDS="${SHARDS-1 5}"
TRIALS="${TRIALS:-3}"
SECS="${SECS:-8}"
CONNS="${CONNS:-16}"
PORT="${PORT:-19280}"
SPHINX_PORT="${SPHINX_PORT:-19406}"
OPENSEARCH="${OPENSEARCH:-0}"
OS_SHARDS="${OS_SHARDS-$SHARDS}"
OS_PORT="${OS_PORT:-19500}"
export OS_HEAP="${OS_HEAP:-1g}"
OS_RUN="$HERE/peers/opensearch/run.sh"
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/shoal-w1.XXXXXX)
RES="$TMP/results"; mkdir -p "$RES"
SERVER_PIN=""; DRIVER_PIN=""
if [ "${PIN:-0}" = 1 ]; then SERVER_PIN="taskset -c 0"; DRIVER_PIN="taskset -c 1"; fi

SHOAL_PID=""; SHOAL_PIDS=""; SPHINX_PIDFILE=""; OS_DIRS=""
cleanup() {
  for d in $OS_DIRS; do "$OS_RUN" stop "$d" || true; done
  for p in $SHOAL_PID $SHOAL_PIDS; do
    if kill -0 "$p" 2>/dev/null; then kill -TERM "$p"; wait "$p" 2>/dev/null || true; fi
  done
  if [ -n "$SPHINX_PIDFILE" ] && [ -s "$SPHINX_PIDFILE" ]; then kill -TERM "$(cat "$SPHINX_PIDFILE")" 2>/dev/null || true; sleep 0.5; fi
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# ---- build what is missing
need=""
[ -x "$BUILD/bin/loadgen" ] || need="loadgen"
[ -z "$SHARDS" ] || [ -x "$BUILD/bin/shoal" ] || need="$need shoal"
if [ -n "$need" ]; then
  cmake -S "$ROOT" -B "$BUILD" >/dev/null
  cmake --build "$BUILD" -j2 --target $need >/dev/null
fi
LOADGEN="$BUILD/bin/loadgen"; SHOAL="$BUILD/bin/shoal"

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average at the start: $LOAD0"
"$PY" "$HERE/w1_data.py" "$ROOT/cluster-scripts/sample/accounts-es.ndjson" "$TMP/data"
NDOCS=$(grep -c '"_index"' "$TMP/data/bulk.ndjson")
# bulk bodies of 5,000 documents
split -l 10000 -d "$TMP/data/bulk.ndjson" "$TMP/data/bulk."

now() { date +%s.%N; }
private_kb() {  # sum of Private_* over the pids given (smaps_rollup)
  local t=0 p v
  for p in "$@"; do
    v=$(awk '/^Private_(Clean|Dirty|Hugetlb):/ {s+=$2} END {print s+0}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
    t=$((t + v))
  done
  echo "$t"
}
wait_http() {
  for _ in $(seq 1 200); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/" && return 0
    kill -0 "$SHOAL_PID" 2>/dev/null || { echo "shoal exited; log:" >&2; tail -20 "$TMP/shoal.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "shoal did not answer on port $PORT" >&2; exit 1
}
start_shoal() {
  $SERVER_PIN "$SHOAL" --solo --data "$1" --http "127.0.0.1:$PORT" >>"$TMP/shoal.log" 2>&1 &
  SHOAL_PID=$!
  wait_http
}
stop_shoal() {
  kill -TERM "$SHOAL_PID"
  for _ in $(seq 1 300); do kill -0 "$SHOAL_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$SHOAL_PID" 2>/dev/null; then echo "shoal did not stop in 30 s" >&2; exit 1; fi
  wait "$SHOAL_PID" 2>/dev/null || true
  SHOAL_PID=""
}
curl_ok() {  # method path [body-file]
  local out="$TMP/curl.out" code
  if [ -n "${3:-}" ]; then
    code=$(curl -s -o "$out" -w '%{http_code}' -X "$1" -H 'Content-Type: application/x-ndjson' --data-binary "@$3" "http://127.0.0.1:$PORT$2")
  else
    code=$(curl -s -o "$out" -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' "http://127.0.0.1:$PORT$2")
  fi
  if [ "$code" != 200 ]; then echo "$1 $2 -> HTTP $code: $(head -c 400 "$out")" >&2; exit 1; fi
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# Warm trials run after every engine is loaded and has had its cold pass,
# engines alternating: trial 1 of each, then trial 2 of each, ...
ENGINES=""  # "tag:proto:port:queries" each
warm_trial() {  # tag proto port queries t
  local tag=$1 proto=$2 port=$3 q=$4 t=$5 l0
  l0=$(loadavg)
  $DRIVER_PIN "$LOADGEN" --proto "$proto" -p "$port" -f "$q" -c "$CONNS" -d "$SECS" -w 1 \
    --label "$tag warm $t" > "$RES/${tag}_warm$t.json"
  echo "   $tag trial $t: load average before $l0, after $(loadavg)"
}

# ---- Shoal
BASE_PORT=$PORT
for S in $SHARDS; do
  tag="shoal_s$S"
  PORT=$((BASE_PORT + S))  # each Shoal stays up on its own port until the end
  D="$TMP/shoal-$S"; mkdir -p "$D"
  echo "== Shoal, $S shard(s)"
  start_shoal "$D"
  # index.requests.cache.enable=false: no result cache answers a query
  # (BENCHMARKS.md rule 2; Shoal's shard request cache is on by default)
  echo "{\"settings\":{\"number_of_shards\":$S,\"number_of_replicas\":0,\"index.requests.cache.enable\":false}}" > "$TMP/create.json"
  code=$(curl -s -o "$TMP/curl.out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
         --data-binary "@$TMP/create.json" "http://127.0.0.1:$PORT/accounts")
  [ "$code" = 200 ] || { echo "create index -> $code $(cat "$TMP/curl.out")" >&2; exit 1; }
  t0=$(now)
  for f in "$TMP"/data/bulk.[0-9]*; do
    curl_ok POST /_bulk "$f"
    grep -q '"errors":false' "$TMP/curl.out" || { echo "bulk had errors: $(head -c 600 "$TMP/curl.out")" >&2; exit 1; }
  done
  curl_ok POST /accounts/_refresh
  t1=$(now)
  curl_ok POST '/accounts/_forcemerge?max_num_segments=1'
  curl_ok GET /accounts/_count
  grep -q "\"count\":$NDOCS" "$TMP/curl.out" || { echo "count after load: $(cat "$TMP/curl.out")" >&2; exit 1; }
  ips=$("$PY" -c "print(round($NDOCS/($t1-$t0)))")
  stop_shoal
  # cold: the first pass right after a restart (validated afterwards)
  start_shoal "$D"
  $DRIVER_PIN "$LOADGEN" -p "$PORT" -f "$TMP/data/q_http.ndjson" -c "$CONNS" -n 7000 -d 60 \
    --validate after --label "$tag cold" > "$RES/${tag}_cold.json"
  ENGINES="$ENGINES $tag:http:$PORT:$TMP/data/q_http.ndjson"
  SHOAL_PIDS="$SHOAL_PIDS $SHOAL_PID"
  echo "$S $SHOAL_PID $ips $(du -sb "$D" | cut -f1)" > "$RES/${tag}_pending"
  SHOAL_PID=""
done
PORT=$BASE_PORT

# ---- OpenSearch 3 over the same documents (OPENSEARCH=1)
if [ "$OPENSEARCH" = 1 ]; then
  "$OS_RUN" build
  OS_VERSION=$("$OS_RUN" version)
  for S in $OS_SHARDS; do
    tag="opensearch_s$S"
    PORT=$((OS_PORT + S))
    D="$TMP/opensearch-$S"
    echo "== OpenSearch $OS_VERSION, $S shard(s), heap $OS_HEAP"
    OS_DIRS="$OS_DIRS $D"
    os_pid=$(TRANSPORT_BASE=$((OS_PORT + 100 + S)) "$OS_RUN" start "$PORT" "$D")
    # the same settings as Shoal's index; the launcher's template already
    # turns the request and query caches off, they are repeated here
    echo "{\"settings\":{\"number_of_shards\":$S,\"number_of_replicas\":0,\"index.requests.cache.enable\":false,\"index.queries.cache.enabled\":false}}" > "$TMP/create.json"
    code=$(curl -s -o "$TMP/curl.out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
           --data-binary "@$TMP/create.json" "http://127.0.0.1:$PORT/accounts")
    [ "$code" = 200 ] || { echo "create index -> $code $(cat "$TMP/curl.out")" >&2; exit 1; }
    curl_ok GET "/_cluster/health/accounts?wait_for_status=green&timeout=60s"
    t0=$(now)
    for f in "$TMP"/data/bulk.[0-9]*; do
      curl_ok POST /_bulk "$f"
      grep -q '"errors":false' "$TMP/curl.out" || { echo "bulk had errors: $(head -c 600 "$TMP/curl.out")" >&2; exit 1; }
    done
    curl_ok POST /accounts/_refresh
    t1=$(now)
    curl_ok POST '/accounts/_forcemerge?max_num_segments=1'
    curl_ok POST /accounts/_refresh
    curl_ok GET /accounts/_count
    grep -q "\"count\":$NDOCS" "$TMP/curl.out" || { echo "count after load: $(cat "$TMP/curl.out")" >&2; exit 1; }
    ips=$("$PY" -c "print(round($NDOCS/($t1-$t0)))")
    "$OS_RUN" stop "$D"
    # cold: the first pass right after a restart, once the shards are started
    os_pid=$(TRANSPORT_BASE=$((OS_PORT + 100 + S)) "$OS_RUN" start "$PORT" "$D")
    curl_ok GET "/_cluster/health/accounts?wait_for_status=green&timeout=120s"
    if [ -n "$SERVER_PIN" ]; then taskset -a -p -c 0 "$os_pid" >/dev/null; fi
    $DRIVER_PIN "$LOADGEN" -p "$PORT" -f "$TMP/data/q_http.ndjson" -c "$CONNS" -n 7000 -d 60 \
      --validate after --label "$tag cold" > "$RES/${tag}_cold.json"
    ENGINES="$ENGINES $tag:http:$PORT:$TMP/data/q_http.ndjson"
    echo "$S $os_pid $ips $(du -sb "$D/node-0/data" | cut -f1) $D" > "$RES/${tag}_ospending"
  done
  PORT=$BASE_PORT
fi

# ---- Sphinx searchd over the same documents
if [ "${NO_SPHINX:-0}" != 1 ]; then
  echo "== Sphinx searchd"
  SP="$TMP/sphinx"; mkdir -p "$SP/data" "$SP/log" "$SP/binlog"
  SPHINX_PIDFILE="$SP/searchd.pid"
  cat > "$SP/w1.conf" <<EOF
source src_accounts
{
	type			= tsvpipe
	tsvpipe_command		= cat $TMP/data/docs.tsv
	tsvpipe_field		= firstname
	tsvpipe_attr_string	= gender
	tsvpipe_attr_uint	= age
	tsvpipe_attr_float	= balance
	tsvpipe_attr_string	= state
}
index accounts
{
	source			= src_accounts
	path			= $SP/data/accounts
	docinfo			= extern
	dict			= keywords
	min_word_len		= 1
	morphology		= none
}
indexer
{
	mem_limit		= 256M
}
searchd
{
	listen			= 127.0.0.1:$SPHINX_PORT:mysql41
	log			= $SP/log/searchd.log
	query_log		= $SP/log/query.log
	pid_file		= $SPHINX_PIDFILE
	binlog_path		= $SP/binlog
	workers			= threads
	max_children		= 64
	read_timeout		= 5
	client_timeout		= 300
	preopen_indexes		= 1
	unlink_old		= 1
	listen_backlog		= 128
}
EOF
  t0=$(now)
  indexer --config "$SP/w1.conf" --all --quiet
  t1=$(now)
  ips=$("$PY" -c "print(round($NDOCS/($t1-$t0)))")
  $SERVER_PIN searchd --config "$SP/w1.conf" > "$SP/log/start.out" 2>&1
  for _ in $(seq 1 50); do
    mysql -h127.0.0.1 -P"$SPHINX_PORT" -e 'SHOW STATUS LIKE "uptime"' >/dev/null 2>&1 && break
    sleep 0.1
  done
  $DRIVER_PIN "$LOADGEN" --proto mysql -p "$SPHINX_PORT" -f "$TMP/data/q_sphinx.ndjson" -c "$CONNS" -n 7000 -d 60 \
    --validate after --label "sphinx cold" > "$RES/sphinx_cold.json"
  ENGINES="$ENGINES sphinx:mysql:$SPHINX_PORT:$TMP/data/q_sphinx.ndjson"
fi

echo "== warm trials, engines alternating"
for t in $(seq 1 "$TRIALS"); do
  for e in $ENGINES; do
    IFS=: read -r tag proto port q <<< "$e"
    warm_trial "$tag" "$proto" "$port" "$q" "$t"
  done
done

for f in "$RES"/*_pending; do
  [ -e "$f" ] || continue
  tag=$(basename "$f" _pending)
  read -r S pid sips disk < "$f"
  pkb=$(private_kb "$pid")
  rss=$(awk '/^Rss:/ {print $2}' "/proc/$pid/smaps_rollup")
  SHOAL_PID=$pid; stop_shoal
  printf '{"label":"Shoal, %s shard%s","protocol":"HTTP/1.1 + ES JSON","index_docs_per_s":%s,"private_kb":%s,"rss_kb":%s,"disk_bytes":%s}\n' \
    "$S" "$([ "$S" = 1 ] || echo s)" "$sips" "$pkb" "$rss" "$disk" > "$RES/${tag}_meta.json"
  rm -f "$f"
done
SHOAL_PIDS=""

for f in "$RES"/*_ospending; do
  [ -e "$f" ] || continue
  tag=$(basename "$f" _ospending)
  read -r S pid sips disk D < "$f"
  pkb=$(private_kb "$pid")
  rss=$(awk '/^Rss:/ {print $2}' "/proc/$pid/smaps_rollup")
  "$OS_RUN" stop "$D"
  printf '{"label":"OpenSearch %s, %s shard%s (heap %s)","protocol":"HTTP/1.1 + ES JSON","index_docs_per_s":%s,"private_kb":%s,"rss_kb":%s,"disk_bytes":%s}\n' \
    "$OS_VERSION" "$S" "$([ "$S" = 1 ] || echo s)" "$OS_HEAP" "$sips" "$pkb" "$rss" "$disk" > "$RES/${tag}_meta.json"
  rm -f "$f"
done

if [ "${NO_SPHINX:-0}" != 1 ]; then
  spid=$(cat "$SPHINX_PIDFILE")
  pids="$spid $(cat /proc/"$spid"/task/*/children 2>/dev/null || true)"
  pkb=$(private_kb $pids)
  rss=$(awk '/^Rss:/ {print $2}' "/proc/$spid/smaps_rollup")
  kill -TERM "$spid"; for _ in $(seq 1 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  SPHINX_PIDFILE=""
  disk=$(du -sb "$SP/data" | cut -f1)
  printf '{"label":"Sphinx 2.2.11 searchd","protocol":"SphinxQL (MySQL 4.1 protocol), SELECT * ... LIMIT 10; SHOW META","index_docs_per_s":%s,"private_kb":%s,"rss_kb":%s,"disk_bytes":%s}\n' \
    "$ips" "$pkb" "$rss" "$disk" > "$RES/sphinx_meta.json"
fi

TABLE=$("$PY" "$HERE/report.py" w1 "$RES")
MACHINE=$("$PY" "$HERE/report.py" machine)
echo
echo "$TABLE"
if [ "${NO_DOC:-0}" != 1 ]; then
  {
    echo "Measured: $MACHINE. $NDOCS documents, $CONNS connections, $TRIALS warm trials of $SECS s"
    echo "(1 s untimed warm-up each; median with min–max; engines alternating between trials;"
    echo "load average at the start $LOAD0), driver \`build/bin/loadgen\` (one epoll"
    echo "thread) on the same machine$([ "${PIN:-0}" = 1 ] && echo ', server pinned to CPU 0 and driver to CPU 1' || echo ', not pinned (2 cores shared by server and driver)')."
    echo "Cold pass: the first 7,000 requests right after a restart, counts validated afterwards."
    echo "Indexing: \`_bulk\` in bodies of 5,000 documents + \`_refresh\` (Shoal$([ "$OPENSEARCH" = 1 ] && echo ', OpenSearch')), \`indexer\` (Sphinx)."
    [ "$OPENSEARCH" != 1 ] || echo "OpenSearch $OS_VERSION: one JVM per shard count, heap $OS_HEAP (-Xms = -Xmx), request and query caches off (tests/bench/peers/opensearch/)."
    echo "Command: \`$([ "$OPENSEARCH" = 1 ] && echo "OPENSEARCH=1 OS_HEAP=$OS_HEAP OS_SHARDS=\"$OS_SHARDS\" ")SHARDS=\"$SHARDS\" TRIALS=$TRIALS SECS=$SECS CONNS=$CONNS tests/bench/w1.sh\`"
    echo
    echo "$TABLE"
  } | "$PY" "$HERE/report.py" section W1
  echo "(written to docs/benchmarks.md, section W1)"
fi
