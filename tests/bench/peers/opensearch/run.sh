#!/bin/bash
# OpenSearch 3.x as a peer server for the Shoal benchmarks (issue #30): real
# OpenSearch nodes started from Maven Central's artifacts (the server jar plus
# the transport-netty4 and analysis-common modules as classpath plugins, see
# OpenSearchPeer.java), one JVM per node, all on 127.0.0.1, security off (no
# security plugin loaded), the shard request cache and the query cache off for
# every index (an index template matching "*").
#
#   run.sh start HTTP_PORT DATA_DIR [--nodes N] [--coordinator]
#       node i answers HTTP on HTTP_PORT+i and transport on TRANSPORT_BASE+i
#       (default HTTP_PORT+100); --coordinator makes node 0 coordinating-only
#       (node.roles: []) and nodes 1..N-1 the cluster-manager-eligible data
#       nodes. Waits until `GET /` answers on every node (and the cluster has
#       N nodes), prints the first node's pid on stdout (the rest on stderr).
#   run.sh stop DATA_DIR       stops every node started in DATA_DIR
#   run.sh build               builds the launcher (start does it on first use)
#   run.sh version             the OpenSearch version in the pom
#
# Environment: OS_HEAP (per node, -Xms = -Xmx; default sized for the machine:
#   a quarter of MemAvailable shared by the nodes, at most 1g and at least
#   256m each; the benchmarks pass 1g for W1 and 512m for W4), JAVA_HOME
#   (default /usr/lib/jvm/temurin-25-jdk-amd64; Java 21+), TRANSPORT_BASE,
#   OS_START_TIMEOUT (seconds, default 240), OS_JAVA_OPTS (appended),
#   PUBLISH_BASE: node i tells the others to connect to 127.0.0.1:PUBLISH_BASE+i
#   (and the seeds are those ports) while it listens on TRANSPORT_BASE+i, for
#   a delay proxy in front of every node's transport (the caller starts them).
# Logs: DATA_DIR/node-I.log; pids: DATA_DIR/node-I.pid.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
JAVA_HOME="${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}"
# a Java 17 JAVA_HOME from the environment can't run OpenSearch 3
if ! "$JAVA_HOME/bin/java" -version 2>&1 | grep -qE 'version "(2[1-9]|[3-9][0-9])'; then
  JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64
fi
export JAVA_HOME
JAVA="$JAVA_HOME/bin/java"
JAR="$HERE/target/opensearch-peer-1.jar"

die() { echo "opensearch/run.sh: $*" >&2; exit 1; }

build() {
  local stamp="$HERE/target/.built"
  if [ -f "$stamp" ] && [ -f "$JAR" ] && [ -d "$HERE/target/lib" ] \
     && [ -z "$(find "$HERE/pom.xml" "$HERE/src" -newer "$stamp" -type f)" ]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn missing (apt-get install maven)"
  [ -x "$JAVA" ] || die "no Java 21+ at $JAVA_HOME"
  rm -rf "$HERE/target/lib"
  (cd "$HERE" && mvn -q -B package >"$HERE/target.build.log" 2>&1) \
    || { grep -v '^WARNING' "$HERE/target.build.log" | tail -30 >&2; die "build failed"; }
  rm -f "$HERE/target.build.log"
  touch "$stamp"
}

stop() {  # DATA_DIR
  local d=$1 f p
  for f in "$d"/node-*.pid; do
    [ -e "$f" ] || continue
    p=$(cat "$f")
    kill -TERM "$p" 2>/dev/null || true
  done
  for f in "$d"/node-*.pid; do
    [ -e "$f" ] || continue
    p=$(cat "$f")
    for _ in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then
      echo "opensearch/run.sh: pid $p did not stop in 30 s, killing it" >&2
      kill -KILL "$p" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

start() {  # HTTP_PORT DATA_DIR [--nodes N] [--coordinator]
  local http=$1 d=$2 n=1 coord=0
  shift 2
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) n=$2; shift 2 ;;
      --coordinator) coord=1; shift ;;
      *) die "unknown option $1" ;;
    esac
  done
  [ "$coord" = 0 ] || [ "$n" -ge 2 ] || die "--coordinator needs --nodes 2 or more"
  local tbase="${TRANSPORT_BASE:-$((http + 100))}" heap="${OS_HEAP:-}"
  if [ -z "$heap" ]; then
    local avail_mb
    avail_mb=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
    heap=$(( avail_mb / 4 / n ))
    [ "$heap" -le 1024 ] || heap=1024
    [ "$heap" -ge 256 ] || heap=256
    heap="${heap}m"
  fi
  build
  mkdir -p "$d"
  d="$(cd "$d" && pwd)"
  local i seeds="" managers="" pids=() pbase="${PUBLISH_BASE:-}" publish=()
  for ((i = 0; i < n; i++)); do
    seeds="$seeds${seeds:+,}127.0.0.1:$((${pbase:-$tbase} + i))"
    if [ "$coord" = 0 ] || [ "$i" -gt 0 ]; then managers="$managers${managers:+,}node-$i"; fi
  done
  [ "$n" -gt 1 ] || seeds=""
  for ((i = 0; i < n; i++)); do
    [ ! -s "$d/node-$i.pid" ] || ! kill -0 "$(cat "$d/node-$i.pid")" 2>/dev/null \
      || die "node-$i already running in $d (pid $(cat "$d/node-$i.pid"))"
    local home="$d/node-$i" roles=()
    [ -z "$pbase" ] || publish=(--transport-publish $((pbase + i)))
    mkdir -p "$home/tmp"
    if [ "$coord" = 1 ]; then
      if [ "$i" = 0 ]; then roles=(--roles ""); else roles=(--roles "cluster_manager,data,ingest"); fi
    fi
    # the distribution's jvm.options that matter here: G1, heap fixed, the
    # netty settings, log4j shut down by the node, not by its own hook
    # shellcheck disable=SC2086
    "$JAVA" -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError \
      -Djava.io.tmpdir="$home/tmp" -Dfile.encoding=UTF-8 \
      -Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true \
      -Dio.netty.recycler.maxCapacityPerThread=0 \
      -Dlog4j.shutdownHookEnabled=false -Dlog4j2.disable.jmx=true \
      --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector ${OS_JAVA_OPTS:-} \
      -cp "$JAR:$HERE/target/lib/*" shoal.bench.OpenSearchPeer \
      --name "node-$i" --home "$home" --http $((http + i)) --transport $((tbase + i)) \
      --seeds "$seeds" --cluster-managers "$managers" "${roles[@]}" "${publish[@]}" \
      >"$d/node-$i.log" 2>&1 < /dev/null &
    pids+=($!)
    echo $! > "$d/node-$i.pid"
  done
  local deadline=$(( $(date +%s) + ${OS_START_TIMEOUT:-240} ))
  for ((i = 0; i < n; i++)); do
    until curl -sf -o /dev/null "http://127.0.0.1:$((http + i))/"; do
      if ! kill -0 "${pids[$i]}" 2>/dev/null; then
        tail -30 "$d/node-$i.log" >&2; stop "$d"; die "node-$i exited (log $d/node-$i.log)"
      fi
      if [ "$(date +%s)" -gt "$deadline" ]; then
        tail -30 "$d/node-$i.log" >&2; stop "$d"; die "node-$i did not answer on port $((http + i))"
      fi
      sleep 0.5
    done
  done
  local base="http://127.0.0.1:$http"
  curl -sf -o /dev/null "$base/_cluster/health?wait_for_nodes=$n&timeout=120s" \
    || { stop "$d"; die "the cluster did not reach $n nodes"; }
  # BENCHMARKS.md rule 2: no result caches. The shard request cache and the
  # (Lucene filter) query cache are index settings; a template sets both off
  # for every index created from now on.
  curl -sf -o /dev/null -X PUT "$base/_index_template/shoal-bench-no-caches" -H 'Content-Type: application/json' \
    -d '{"index_patterns":["*"],"priority":0,"template":{"settings":{"index.requests.cache.enable":false,"index.queries.cache.enabled":false}}}' \
    || { stop "$d"; die "could not put the index template"; }
  local v
  v=$(curl -s "$base/" | sed -n 's/.*"number" *: *"\([^"]*\)".*/\1/p' | head -1)
  echo "opensearch/run.sh: OpenSearch $v, $n node(s)$([ "$coord" = 1 ] && echo ' (node-0 coordinating-only)'), heap $heap per node (-Xms=-Xmx), HTTP 127.0.0.1:$http..$((http + n - 1)), pids ${pids[*]}" >&2
  echo "${pids[0]}"
}

case "${1:-}" in
  start) [ $# -ge 3 ] || die "usage: run.sh start HTTP_PORT DATA_DIR [--nodes N] [--coordinator]"; shift; start "$@" ;;
  stop) [ $# -eq 2 ] || die "usage: run.sh stop DATA_DIR"; stop "$2" ;;
  build) build ;;
  version) sed -n 's:.*<opensearch.version>\(.*\)</opensearch.version>.*:\1:p' "$HERE/pom.xml" ;;
  *) die "usage: run.sh start HTTP_PORT DATA_DIR [--nodes N] [--coordinator] | stop DATA_DIR | build | version" ;;
esac
