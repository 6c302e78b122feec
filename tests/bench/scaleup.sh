#!/bin/bash
# W6 scale-up (docs/scaleup.md): how much of this machine one Shoal process
# keeps busy. Prints tables; not a test.
#   index  shoal-engine to one segment with 1, 2, 4, ... nproc threads
#   bulk   HTTP _bulk into a 1-shard index of `shoal --solo`, 1 and nproc streams
#   query  server CPU per query of each W1 query on 1, 2, 5, 16 shards of one
#          node, then the W1 mix from several load generators
#
# Runs from a source tree (binaries from BUILD, default <repo>/build; data made
# by scaleup_data.sh, which needs python3 and dict-gcide) or from an unpacked
# bundle.sh tarball (bin/, lib/, data/ beside this script: needs only bash,
# coreutils, awk, gzip and curl; the bundle carries curl when it can).
#
# Usage: scaleup.sh [--quick] [--trials N] [--copies K] [--sections "index bulk query"]
#          [--threads "1 2 4"] [--streams "1 16"] [--shards "1 2 5 16"] [--secs S]
#          [--conns C] [--generators G] [--ram-mb R] [--bulk-docs N] [--port P]
#          [--data DIR] [--work DIR] [--keep]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

NPROC=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
TRIALS=""; QUICK=0; COPIES=""; SECTIONS="index bulk query"; THREADS=""; STREAMS=""
SHARDS=""; SECS=""; CONNS=16; GENERATORS=""; RAM_MB=""; BULK_DOCS=""; PORT=19380
DATA=""; WORK=""; KEEP=0; LIMIT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; shift; continue ;;
    --keep) KEEP=1; shift; continue ;;
    -h|--help) usage ;;
  esac
  [ $# -ge 2 ] || usage
  case "$1" in
    --trials) TRIALS=$2 ;; --copies) COPIES=$2 ;; --sections) SECTIONS=$2 ;;
    --threads) THREADS=$2 ;; --streams) STREAMS=$2 ;; --shards) SHARDS=$2 ;;
    --secs) SECS=$2 ;; --conns) CONNS=$2 ;; --generators) GENERATORS=$2 ;;
    --ram-mb) RAM_MB=$2 ;; --bulk-docs) BULK_DOCS=$2 ;; --port) PORT=$2 ;;
    --data) DATA=$2 ;; --work) WORK=$2 ;;
    *) usage ;;
  esac
  shift 2
done
if [ "$QUICK" = 1 ]; then
  # a smoke run: 2 x 1,500 documents (1 MB of indexing RAM, so that the
  # force merge has segments to merge), one trial, 1 s per query run
  LIMIT=1500; : "${TRIALS:=1}" "${COPIES:=2}" "${SECS:=1}" "${BULK_DOCS:=500}" "${RAM_MB:=1}"
fi
: "${TRIALS:=3}" "${COPIES:=8}" "${SECS:=5}" "${BULK_DOCS:=1000}" "${SHARDS:=1 2 5 16}" "${RAM_MB:=256}"
: "${GENERATORS:=$(( (NPROC + 3) / 4 ))}"
if [ -z "$THREADS" ]; then
  t=1
  while [ "$t" -lt "$NPROC" ]; do THREADS="$THREADS $t"; t=$((t * 2)); done
  THREADS="${THREADS# } $NPROC"; THREADS="${THREADS# }"
fi
if [ -z "$STREAMS" ]; then STREAMS=1; [ "$NPROC" -gt 1 ] && STREAMS="1 $NPROC"; fi

# ---- binaries: an unpacked bundle (run through its own loader) or a build
if [ -x "$HERE/bin/shoal" ] && [ -e "$HERE/lib/ld-linux-x86-64.so.2" ]; then
  LAYOUT="bundle ($HERE: bin/ run by lib/ld-linux-x86-64.so.2 --library-path lib)"
  run_with() { echo "$HERE/lib/ld-linux-x86-64.so.2 --library-path $HERE/lib $HERE/bin/$1"; }
  : "${DATA:=$HERE/data}"
  VERSION_NOTE=$(tr '\n' ' ' < "$HERE/VERSION" 2>/dev/null || echo unknown)
else
  ROOT="$(cd "$HERE/../.." && pwd)"
  BUILD="${BUILD:-$ROOT/build}"
  for b in shoal shoal-engine loadgen; do
    [ -x "$BUILD/bin/$b" ] || { echo "scaleup.sh: $BUILD/bin/$b missing (cmake --build $BUILD --target $b)" >&2; exit 1; }
  done
  LAYOUT="build tree ($BUILD/bin)"
  run_with() { echo "$BUILD/bin/$1"; }
  VERSION_NOTE="commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' + local changes')"
fi
# word-split on purpose below: no path here holds a space (checked)
case "$HERE" in *' '*) echo "scaleup.sh: the path $HERE holds a space" >&2; exit 1 ;; esac
SHOAL=$(run_with shoal); ENGINE=$(run_with shoal-engine); LOADGEN=$(run_with loadgen)
if command -v curl >/dev/null 2>&1; then CURL=curl; CURL_NOTE="$(command -v curl)"
elif [ -x "$HERE/bin/curl" ] && [ -e "$HERE/lib/ld-linux-x86-64.so.2" ]; then CURL=$(run_with curl); CURL_NOTE="the bundle's bin/curl"
else echo "scaleup.sh: needs curl (none on PATH, none in the bundle)" >&2; exit 1; fi
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

WORK="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/shoal-scaleup.XXXXXX")}"
mkdir -p "$WORK"; RES="$WORK/results"; mkdir -p "$RES"
PIDS=""
cleanup() {
  for p in $PIDS; do
    if kill -0 "$p" 2>/dev/null; then kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; fi
  done
  if [ "$KEEP" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

if [ -z "$DATA" ]; then
  DATA="$WORK/data"
  if ! command -v python3 >/dev/null 2>&1; then
    echo "scaleup.sh: no bundle data and no python3 to make it; run bundle.sh elsewhere, or pass --data DIR" >&2; exit 1
  fi
  "$HERE/scaleup_data.sh" "$DATA"
fi
for f in gcide.ndjson.gz gcide_map.json w1_bulk.ndjson.gz w1_queries.ndjson; do
  [ -s "$DATA/$f" ] || { echo "scaleup.sh: $DATA/$f missing" >&2; exit 1; }
done

# ---- helpers
now() { date +%s.%N; }
loadavg() { echo "load average: $(cut -d' ' -f1-3 /proc/loadavg | sed 's/ /, /g')"; }
section_load() { echo "($1 $(loadavg))"; }
calc() { awk "BEGIN { printf \"%.${2:-3}f\", ($1) }"; }  # parenthesised: a bare > would redirect
proc_cpu() {  # CPU seconds (user + system, all threads) of PID so far
  awk -v tck="$CLK_TCK" '{ sub(/^.*\) /, ""); printf "%.3f", ($12 + $13) / tck }' "/proc/$1/stat"
}
median() {  # numbers -> "median (min–max)", or the one number
  printf '%s\n' "$@" | sort -g | awk -v d="${FMT_DIGITS:-2}" '
    { a[NR] = $1 }
    END {
      m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
      if (NR == 1) printf "%.*f", d, m
      else printf "%.*f (%.*f–%.*f)", d, m, d, a[1], d, a[NR]
    }'
}
med1() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
kv() { awk -F': ' -v k="$1" '$1 == k { print $2 }' "$2"; }       # key: value files
jnum() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" "$2"; }        # one-line JSON
die() { echo "scaleup.sh: $*" >&2; exit 1; }

http() {  # METHOD PORT PATH [BODY-FILE] -> reply in $WORK/http.out; dies unless 200
  local code
  if [ -n "${4:-}" ]; then
    code=$($CURL -s -o "$WORK/http.out" -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' \
           --data-binary "@$4" "http://127.0.0.1:$2$3")
  else
    code=$($CURL -s -o "$WORK/http.out" -w '%{http_code}' -X "$1" "http://127.0.0.1:$2$3")
  fi
  [ "$code" = 200 ] || die "$1 $3 -> HTTP $code: $(head -c 400 "$WORK/http.out")"
}
start_shoal() {  # DATADIR PORT -> SHOAL_PID
  $SHOAL --solo --data "$1" --http "127.0.0.1:$2" >>"$WORK/shoal.log" 2>&1 &
  SHOAL_PID=$!; PIDS="$PIDS $SHOAL_PID"
  for _ in $(seq 1 300); do
    $CURL -sf -o /dev/null "http://127.0.0.1:$2/" && return 0
    kill -0 "$SHOAL_PID" 2>/dev/null || { tail -20 "$WORK/shoal.log" >&2; die "shoal exited"; }
    sleep 0.1
  done
  die "shoal did not answer on port $2"
}
stop_shoal() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$1" 2>/dev/null && die "shoal $1 did not stop in 30 s"
  wait "$1" 2>/dev/null || true
}
# Creates index NAME with SETTINGS_JSON (and MAPPINGS_JSON), trying the request
# cache setting first; RC_NOTE says what happened.
RC_NOTE=""
create_index() {  # PORT NAME SETTINGS [MAPPINGS]
  local port=$1 name=$2 settings=$3 mappings=${4:-} body code
  body="{\"settings\":{${settings},\"index.requests.cache.enable\":false}${mappings:+,\"mappings\":$mappings}}"
  printf '%s' "$body" > "$WORK/create.json"
  code=$($CURL -s -o "$WORK/http.out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
         --data-binary "@$WORK/create.json" "http://127.0.0.1:$port/$name")
  if [ "$code" = 200 ]; then
    RC_NOTE="request cache: index.requests.cache.enable=false accepted and set on every index"
    return 0
  fi
  RC_NOTE="request cache: Shoal refused index.requests.cache.enable=false (HTTP $code: $(sed -n 's/.*"reason":"\([^"]*\)".*/\1/p' "$WORK/http.out" | sed 's/ please .*//' | head -c 160)); created without it (Shoal keeps no request cache; the request_cache URL parameter is accepted and ignored)"
  printf '%s' "{\"settings\":{${settings}}${mappings:+,\"mappings\":$mappings}}" > "$WORK/create.json"
  http PUT "$port" "/$name" "$WORK/create.json"
}

echo "# Shoal scale-up (W6)"
echo
echo "nproc: $NPROC"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "memory: $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
echo "binaries: $LAYOUT; $VERSION_NOTE"
echo "http client for _bulk and setup: $CURL_NOTE ($($CURL --version | head -1 | cut -d' ' -f1-2))"
echo "data: $DATA ($(tr '\n' ';' < "$DATA/MANIFEST" 2>/dev/null | sed 's/;$//; s/;/; /g'))"
echo "started: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(loadavg)"
echo "settings: trials $TRIALS, copies $COPIES, threads '$THREADS', streams '$STREAMS', shards '$SHARDS', ${SECS} s per query run, $CONNS connections per generator, $GENERATORS generator(s), ram-mb $RAM_MB, bulk bodies of $BULK_DOCS docs$([ "$QUICK" = 1 ] && echo ', QUICK smoke run (tiny sizes: numbers mean nothing)')"
if awk '{ exit !($1 > 0.5) }' /proc/loadavg; then
  echo "WARNING: the 1-minute load average is above 0.5 at the start: something else runs here, so these tables are not a measurement (docs/benchmarks.md rule 8)."
fi

# ---- the corpus: base GCIDE x COPIES, ids rewritten per copy ("c<k>-<id>")
need_corpus=0
case " $SECTIONS " in *" index "*|*" bulk "*) need_corpus=1 ;; esac
if [ "$need_corpus" = 1 ]; then
  if [ -n "$LIMIT" ]; then gzip -dc "$DATA/gcide.ndjson.gz" | head -n "$LIMIT" > "$WORK/base.ndjson" || true
  else gzip -dc "$DATA/gcide.ndjson.gz" > "$WORK/base.ndjson"; fi
  # distinct ids in the base make distinct ids in every copy ("c<k>-" prefixes)
  dups=$(sed -n 's/^{"id": \{0,1\}"\([^"]*\)".*/\1/p' "$WORK/base.ndjson" | LC_ALL=C sort | LC_ALL=C uniq -d | head -3 | tr '\n' ' ')
  [ -z "$dups" ] || die "corpus ids repeat: $dups"
  : > "$WORK/corpus.ndjson"
  for c in $(seq 1 "$COPIES"); do
    awk -v c="$c" '{ if (!sub(/^\{"id": ?"/, "&c" c "-")) { print "line " NR ": no leading id" > "/dev/stderr"; exit 1 } print }' \
      "$WORK/base.ndjson" >> "$WORK/corpus.ndjson"
  done
  NDOCS=$(wc -l < "$WORK/corpus.ndjson")
  rm -f "$WORK/base.ndjson"
  echo "corpus: $NDOCS documents (GCIDE x$COPIES, distinct ids), $(du -m "$WORK/corpus.ndjson" | cut -f1) MB"
fi

# ================================================================ index
if [[ " $SECTIONS " == *" index "* ]]; then
  echo
  echo "## Indexing to one segment, shoal-engine"
  section_load "before:"
  for t in $(seq 1 "$TRIALS"); do
    for T in $THREADS; do   # thread counts alternate within each trial
      rm -rf "$WORK/idx"
      out="$RES/index_T${T}_t$t.txt"
      $ENGINE index --mapping "$DATA/gcide_map.json" --in "$WORK/corpus.ndjson" --out "$WORK/idx" \
        --ram-mb "$RAM_MB" --threads "$T" --force-merge 1 --id-field id > "$out" 2>"$out.err" \
        || die "shoal-engine index --threads $T failed: $(tail -3 "$out.err")"
      [ "$(kv docs "$out")" = "$NDOCS" ] && [ "$(kv failed "$out")" = 0 ] && [ "$(kv live_docs "$out")" = "$NDOCS" ] \
        || die "shoal-engine --threads $T: docs $(kv docs "$out"), failed $(kv failed "$out"), live $(kv live_docs "$out"), want $NDOCS"
      [ "$(kv segments "$out")" = 1 ] || die "shoal-engine --threads $T left $(kv segments "$out") segments"
      echo "  trial $t, $T thread(s): searchable $(kv searchable_s "$out") s, force merge $(kv force_merge_s "$out") s ($(loadavg))"
    done
  done
  rm -rf "$WORK/idx"
  echo
  echo "$NDOCS documents; \`shoal-engine index --ram-mb $RAM_MB --threads T --force-merge 1 --id-field id\`; busy cores = process CPU-s ÷ wall s; median (min–max) of $TRIALS trial(s)."
  echo
  echo "| threads | to searchable s | busy cores to searchable | force merge s | busy cores in merge | total s | docs/s to searchable | docs/s total | index MB |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for T in $THREADS; do
    s=(); bs=(); fm=(); bf=(); tot=(); ds=(); dt=(); mb=()
    for t in $(seq 1 "$TRIALS"); do
      f="$RES/index_T${T}_t$t.txt"
      a=$(kv searchable_s "$f"); b=$(kv cpu_searchable_s "$f"); c=$(kv force_merge_s "$f"); d=$(kv force_merge_cpu_s "$f"); e=$(kv total_s "$f")
      s+=("$a"); bs+=("$(calc "$b / $a" 2)"); fm+=("$c"); bf+=("$(calc "$c > 0 ? $d / $c : 0" 2)"); tot+=("$e")
      ds+=("$(calc "$NDOCS / $a" 0)"); dt+=("$(calc "$NDOCS / $e" 0)"); mb+=("$(calc "$(kv index_bytes "$f") / 1048576" 1)")
    done
    echo "| $T | $(median "${s[@]}") | $(median "${bs[@]}") | $(median "${fm[@]}") | $(median "${bf[@]}") | $(median "${tot[@]}") | $(FMT_DIGITS=0 median "${ds[@]}") | $(FMT_DIGITS=0 median "${dt[@]}") | $(FMT_DIGITS=1 median "${mb[@]}") |"
  done
  section_load "after:"
fi

# ================================================================ bulk
if [[ " $SECTIONS " == *" bulk "* ]]; then
  echo
  echo "## HTTP _bulk into one shard of shoal --solo"
  section_load "before:"
  mkdir -p "$WORK/bulk"
  awk '{
    id = $0; sub(/^\{"id": ?"/, "", id); sub(/".*/, "", id)
    print "{\"index\":{\"_index\":\"gcb\",\"_id\":\"" id "\"}}"; print
  }' "$WORK/corpus.ndjson" | split -l $((2 * BULK_DOCS)) -a 6 -d - "$WORK/bulk/b."
  nbodies=$(ls "$WORK/bulk" | wc -l)
  mapping=$(cat "$DATA/gcide_map.json")
  bport=$PORT
  for t in $(seq 1 "$TRIALS"); do
    for S in $STREAMS; do   # stream counts alternate within each trial
      d="$WORK/node-bulk"; rm -rf "$d"; mkdir -p "$d"
      start_shoal "$d" "$bport"
      create_index "$bport" gcb '"number_of_shards":1,"number_of_replicas":0' "$mapping"
      # one keep-alive curl per stream over every S-th body
      for s in $(seq 0 $((S - 1))); do
        cfg="$WORK/stream$s.cfg"; : > "$cfg"; i=0
        for f in "$WORK"/bulk/b.*; do
          if [ $((i % S)) = "$s" ]; then
            [ -s "$cfg" ] && echo next >> "$cfg"
            printf 'url = "http://127.0.0.1:%s/_bulk"\ndata-binary = "@%s"\nheader = "Content-Type: application/x-ndjson"\noutput = "%s"\nwrite-out = "%%{http_code}\\n"\n' \
              "$bport" "$f" "$WORK/resp.$s.$i" >> "$cfg"
          fi
          i=$((i + 1))
        done
      done
      rm -f "$WORK"/resp.*
      c0=$(proc_cpu "$SHOAL_PID"); t0=$(now)
      spids=""
      for s in $(seq 0 $((S - 1))); do
        $CURL -s -K "$WORK/stream$s.cfg" > "$WORK/codes.$s" 2>&1 &
        spids="$spids $!"
      done
      for p in $spids; do wait "$p" || die "a _bulk stream failed (curl exit $?)"; done
      http POST "$bport" /gcb/_refresh
      t1=$(now); c1=$(proc_cpu "$SHOAL_PID")
      bad=$(cat "$WORK"/codes.* | grep -vc '^200$' || true)
      [ "$bad" = 0 ] || die "$bad _bulk replies were not HTTP 200: $(grep -v '^200$' "$WORK"/codes.* | head -3)"
      [ "$(ls "$WORK"/resp.* | wc -l)" = "$nbodies" ] || die "$(ls "$WORK"/resp.* | wc -l) _bulk replies for $nbodies bodies"
      if grep -l '"errors":true' "$WORK"/resp.* >/dev/null 2>&1; then die "_bulk reported errors: $(grep -h -o '"reason":"[^"]*"' "$WORK"/resp.* | head -3)"; fi
      http GET "$bport" /gcb/_count
      got=$(sed -n 's/.*"count":\([0-9]*\).*/\1/p' "$WORK/http.out")
      [ "$got" = "$NDOCS" ] || die "_count after refresh: $got, want $NDOCS"
      echo "$(calc "$t1 - $t0") $(calc "$c1 - $c0")" > "$RES/bulk_S${S}_t$t.txt"
      stop_shoal "$SHOAL_PID"
      echo "  trial $t, $S stream(s): $(calc "$t1 - $t0") s, server CPU $(calc "$c1 - $c0") s ($(loadavg))"
    done
  done
  rm -rf "$WORK/bulk" "$WORK/node-bulk" "$WORK"/resp.* "$WORK"/codes.* "$WORK"/stream*.cfg
  echo
  echo "$NDOCS documents in $nbodies bodies of $BULK_DOCS; 1 shard, 0 replicas; timed from the first byte sent until \`POST /gcb/_refresh\` returns (\`_count\` checked afterwards); busy cores = the shoal process's CPU-s (/proc/PID/stat) ÷ wall s; median (min–max) of $TRIALS trial(s). $RC_NOTE."
  echo
  echo "| streams | until searchable s | docs/s | server busy cores | server CPU-s per 1,000 docs |"
  echo "|---|---|---|---|---|"
  for S in $STREAMS; do
    w=(); ds=(); bc=(); cpk=()
    for t in $(seq 1 "$TRIALS"); do
      read -r a b < "$RES/bulk_S${S}_t$t.txt"
      w+=("$a"); ds+=("$(calc "$NDOCS / $a" 0)"); bc+=("$(calc "$b / $a" 2)"); cpk+=("$(calc "$b * 1000 / $NDOCS" 4)")
    done
    echo "| $S | $(median "${w[@]}") | $(FMT_DIGITS=0 median "${ds[@]}") | $(median "${bc[@]}") | $(FMT_DIGITS=4 median "${cpk[@]}") |"
  done
  section_load "after:"
fi

# ================================================================ query
# GENERATORS loadgen processes at once against PORT with query file FILE;
# writes OUT.g<k>.json each and OUT.sum: wall-s server-CPU-s qps requests
# driver-CPU-s highest-generator-qps worst-p50-us worst-p99-us
gens() {  # PORT PID FILE OUT LABEL
  local port=$1 pid=$2 file=$3 out=$4 label=$5 c0 c1 t0 t1 gp="" g x f
  c0=$(proc_cpu "$pid"); t0=$(now)
  for g in $(seq 1 "$GENERATORS"); do
    $LOADGEN -p "$port" -f "$file" -c "$CONNS" -d "$SECS" --validate none \
      --label "$label g$g" > "$out.g$g.json" 2>"$out.g$g.err" &
    gp="$gp $!"
  done
  for x in $gp; do wait "$x" || die "a load generator failed ($label): $(cat "$out".g*.err | grep -v conns= | head -3)"; done
  t1=$(now); c1=$(proc_cpu "$pid")
  for g in $(seq 1 "$GENERATORS"); do
    [ "$(jnum errors "$out.g$g.json")" = 0 ] || die "$label: $(jnum errors "$out.g$g.json") errors in generator $g"
  done
  for g in $(seq 1 "$GENERATORS"); do
    f="$out.g$g.json"
    echo "$(jnum qps "$f") $(jnum requests "$f") $(jnum driver_cpu_s "$f") $(jnum p50_us "$f") $(jnum p99_us "$f")"
  done | awk -v w="$(calc "$t1 - $t0")" -v c="$(calc "$c1 - $c0")" '
    { q += $1; r += $2; d += $3; if ($1 > mq) mq = $1; if ($4 > p50) p50 = $4; if ($5 > p99) p99 = $5 }
    END { printf "%s %s %.1f %d %.3f %.1f %.1f %.1f\n", w, c, q, r, d, mq, p50, p99 }' > "$out.sum"
}

if [[ " $SECTIONS " == *" query "* ]]; then
  echo
  echo "## W1 queries: server CPU per query by shard count, and the mix"
  section_load "before:"
  gzip -dc "$DATA/w1_bulk.ndjson.gz" | split -l 10000 -a 4 -d - "$WORK/w1b."
  W1DOCS=$(gzip -dc "$DATA/w1_bulk.ndjson.gz" | grep -c '"_index"')
  NQ=$(grep -c . "$DATA/w1_queries.ndjson")
  for q in $(seq 1 "$NQ"); do sed -n "${q}p" "$DATA/w1_queries.ndjson" > "$WORK/q$q.ndjson"; done
  declare -A QPORT QPID
  p=$((PORT + 1))
  for S in $SHARDS; do   # every node stays up until the end, one port each
    d="$WORK/node-s$S"; mkdir -p "$d"
    start_shoal "$d" "$p"
    QPORT[$S]=$p; QPID[$S]=$SHOAL_PID
    create_index "$p" accounts "\"number_of_shards\":$S,\"number_of_replicas\":0"
    for f in "$WORK"/w1b.*; do
      code=$($CURL -s -o "$WORK/http.out" -w '%{http_code}' -X POST -H 'Content-Type: application/x-ndjson' \
             --data-binary "@$f" "http://127.0.0.1:$p/_bulk")
      [ "$code" = 200 ] && grep -q '"errors":false' "$WORK/http.out" || die "W1 _bulk -> $code $(head -c 300 "$WORK/http.out")"
    done
    http POST "$p" /accounts/_refresh
    http POST "$p" '/accounts/_forcemerge?max_num_segments=1'
    http GET "$p" /accounts/_count
    grep -q "\"count\":$W1DOCS" "$WORK/http.out" || die "W1 count on $S shard(s): $(cat "$WORK/http.out")"
    # untimed validation: every query's exact count (loadgen exits 3 on a mismatch)
    $LOADGEN -p "$p" -f "$DATA/w1_queries.ndjson" -c 1 -n 1 -d 10 --validate before --label "validate s$S" \
      > "$RES/validate_s$S.json" 2>"$RES/validate_s$S.err" || die "W1 validation on $S shard(s) failed: $(cat "$RES/validate_s$S.err")"
    echo "  $S shard(s): $W1DOCS docs loaded, force-merged, $NQ counts validated (port $p, pid $SHOAL_PID)"
    p=$((p + 1))
  done
  rm -f "$WORK"/w1b.*
  # each query alone from the same generators, shard counts alternating within a trial
  for t in $(seq 1 "$TRIALS"); do
    for q in $(seq 1 "$NQ"); do
      for S in $SHARDS; do
        gens "${QPORT[$S]}" "${QPID[$S]}" "$WORK/q$q.ndjson" "$RES/q${q}_s${S}_t$t" "q$q s$S t$t"
      done
    done
    echo "  trial $t of the single queries done ($(loadavg))"
  done
  echo
  echo "Server CPU per query, µs (the shoal process's CPU-s over a ${SECS} s closed loop of one query from $GENERATORS generator(s) × $CONNS connections ÷ requests answered), and qps summed over generators; $W1DOCS documents, one segment per shard; median (min–max) of $TRIALS trial(s). $RC_NOTE."
  echo
  hdr="| query |"; sep="|---|"
  for S in $SHARDS; do
    hdr="$hdr $S shard$([ "$S" = 1 ] || echo s) µs/query |"; sep="$sep---|"
    [ "$S" = "$(echo $SHARDS | cut -d' ' -f1)" ] || { hdr="$hdr × first |"; sep="$sep---|"; }
  done
  for S in $SHARDS; do hdr="$hdr qps $S |"; sep="$sep---|"; done
  echo "$hdr"; echo "$sep"
  S0=$(echo $SHARDS | cut -d' ' -f1)
  declare -A GEO
  for q in $(seq 1 "$NQ"); do
    body=$(sed 's/.*"query": \{0,1\}\(.*\), \{0,1\}"track_total_hits".*/\1/' "$WORK/q$q.ndjson")
    row="| $q \`$(echo "$body" | head -c 70)\` |"
    declare -A MED
    for S in $SHARDS; do
      us=()
      for t in $(seq 1 "$TRIALS"); do
        read -r _ c _ r _ < "$RES/q${q}_s${S}_t$t.sum"
        us+=("$(calc "$c * 1e6 / $r" 1)")
      done
      MED[$S]=$(med1 "${us[@]}")
      row="$row $(FMT_DIGITS=1 median "${us[@]}") |"
      if [ "$S" != "$S0" ]; then
        r=$(calc "${MED[$S]} / ${MED[$S0]}" 2); row="$row ${r}× |"
        GEO[$S]="${GEO[$S]:-} $r"
      fi
    done
    for S in $SHARDS; do
      qs=(); for t in $(seq 1 "$TRIALS"); do read -r _ _ x _ < "$RES/q${q}_s${S}_t$t.sum"; qs+=("$x"); done
      row="$row $(FMT_DIGITS=0 median "${qs[@]}") |"
    done
    echo "$row"
    unset MED
  done
  echo
  for S in $SHARDS; do
    [ "$S" = "$S0" ] && continue
    echo "Geometric mean of the CPU-per-query ratio, $S shards ÷ $S0: $(printf '%s\n' ${GEO[$S]} | awk '{ s += log($1) } END { printf "%.2f×", exp(s / NR) }')"
  done

  # the W1 mix from GENERATORS load generators at once
  for t in $(seq 1 "$TRIALS"); do
    for S in $SHARDS; do
      gens "${QPORT[$S]}" "${QPID[$S]}" "$DATA/w1_queries.ndjson" "$RES/mix_s${S}_t$t" "mix s$S t$t"
    done
    echo "  trial $t of the mix done ($(loadavg))"
  done
  echo
  echo "W1 mix: $GENERATORS generator(s) × $CONNS keep-alive connections, ${SECS} s each, all seven queries in turn; qps summed over generators; server busy cores = shoal CPU-s ÷ wall s from the first generator's start to the last one's exit; driver busy cores = the generators' own CPU-s ÷ ${SECS} s (one generator tops out near 45k qps: a generator near that is the limit, so rerun with more --generators); median (min–max) of $TRIALS trial(s)."
  echo
  echo "| shards | qps | × first | server busy cores | server CPU µs/query | highest qps of one generator | driver busy cores | worst generator p50 µs | worst generator p99 µs |"
  echo "|---|---|---|---|---|---|---|---|---|"
  QPS0=""
  for S in $SHARDS; do
    qps=(); bc=(); cpq=(); gmax=(); drv=(); p50=(); p99=()
    for t in $(seq 1 "$TRIALS"); do
      read -r w c sumq sumr sumd mx w50 w99 < "$RES/mix_s${S}_t$t.sum"
      qps+=("$sumq"); bc+=("$(calc "$c / $w" 2)"); cpq+=("$(calc "$c * 1e6 / $sumr" 1)")
      gmax+=("$mx"); drv+=("$(calc "$sumd / $SECS" 2)"); p50+=("$w50"); p99+=("$w99")
    done
    m=$(med1 "${qps[@]}"); [ -n "$QPS0" ] || QPS0=$m
    echo "| $S | $(FMT_DIGITS=0 median "${qps[@]}") | $(calc "$m / $QPS0" 2)× | $(median "${bc[@]}") | $(FMT_DIGITS=1 median "${cpq[@]}") | $(FMT_DIGITS=0 median "${gmax[@]}") | $(median "${drv[@]}") | $(FMT_DIGITS=0 median "${p50[@]}") | $(FMT_DIGITS=0 median "${p99[@]}") |"
  done
  for S in $SHARDS; do stop_shoal "${QPID[$S]}"; done
  section_load "after:"
fi
echo
echo "finished: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(loadavg)"
