#!/usr/bin/env bash
# A local Shoal cluster on 127.0.0.1 with the sample accounts loaded.
#   cluster-scripts/local-cluster.sh up [--nodes N] [--shards S] [--replicas R] [--no-sample]
#       install what is missing, build (incrementally), write the cluster file,
#       start N nodes (default 2) detached, wait for green, load 1,000 accounts
#       (S shards, R replicas; default 2 and 1), show example queries
#   cluster-scripts/local-cluster.sh down          stop every node
#   cluster-scripts/local-cluster.sh status        which nodes run, health, shards
#   cluster-scripts/local-cluster.sh kill NODE     kill -9 one node (node-2, ...)
#   cluster-scripts/local-cluster.sh restart NODE  start it again (after kill)
# Node i listens on HTTP 9200+i-1 and transport 9300+i-1; data, pid and log
# of each live in ./data/node-i, the cluster file is ./data/cluster.json.
# Environment: SHOAL_BASE_PORT (default 9200; transport ports are 100 higher),
# SHOAL_BUILD_DIR (default build, relative to the repository or absolute),
# SHOAL_BIN (a directory holding an already built shoal: used as is, never
# rebuilt), SHOAL_DATA_DIR (default ./data), SHOAL_NODE_ARGS (extra arguments
# for every node, e.g. "-E cluster.primary_failover_timeout=3s").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BASE=${SHOAL_BASE_PORT:-9200}
TBASE=$((BASE + 100))
BUILD_DIR=${SHOAL_BUILD_DIR:-build}
case "$BUILD_DIR" in
/*) ;;
*) BUILD_DIR="$ROOT/$BUILD_DIR" ;;
esac
if [ -n "${SHOAL_BIN:-}" ]; then
	BIN="$SHOAL_BIN/shoal"
else
	BIN="$BUILD_DIR/bin/shoal"
fi
read -r -a NODE_ARGS <<<"${SHOAL_NODE_ARGS:-}"
DATA_ROOT=${SHOAL_DATA_DIR:-"$ROOT/data"}
CFILE="$DATA_ROOT/cluster.json"
SAMPLE="$ROOT/cluster-scripts/sample/accounts-es.ndjson"
URL="http://127.0.0.1:$BASE"
NODES=2
SHARDS=2
REPLICAS=1
SAMPLE_ON=1

say() { printf '%s\n' "$*"; }
die() { printf 'local-cluster: %s\n' "$*" >&2; exit 1; }

pidfile() { echo "$DATA_ROOT/$1/shoal.pid"; }

running_pid() {
	local f pid
	f=$(pidfile "$1")
	[ -f "$f" ] || return 1
	pid=$(cat "$f" 2>/dev/null || true)
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && { echo "$pid"; return 0; }
	return 1
}

# curl with a bounded wait; prints the body.
http() { curl -sS --max-time 60 "$@"; }

# The nodes named in the cluster file, in order.
cluster_nodes() {
	[ -f "$CFILE" ] || return 0
	python3 -c 'import json,sys; [print(n["name"]) for n in json.load(open(sys.argv[1]))["nodes"]]' "$CFILE"
}

node_url() {
	python3 -c 'import json,sys
for n in json.load(open(sys.argv[1]))["nodes"]:
    if n["name"] == sys.argv[2]: print("http://" + n["http"])' "$CFILE" "$1"
}

write_cluster_file() {
	mkdir -p "$DATA_ROOT"
	python3 - "$CFILE" "$NODES" "$BASE" "$TBASE" <<'PY'
import json, secrets, sys
path, n, base, tbase = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
spec = {"cluster_name": "shoal-local", "secret": secrets.token_hex(16), "nodes": [
    {"name": "node-%d" % (i + 1), "http": "127.0.0.1:%d" % (base + i),
     "transport": "127.0.0.1:%d" % (tbase + i)} for i in range(n)]}
with open(path, "w") as f:
    json.dump(spec, f, indent=1)
PY
}

start_node() {
	local name=$1 dir="$DATA_ROOT/$1" pid
	mkdir -p "$dir"
	if pid=$(running_pid "$name"); then
		say "$name already running (pid $pid)"
		return 0
	fi
	# every node may keep snapshot repositories under DATA_ROOT/repo (shared)
	mkdir -p "$DATA_ROOT/repo"
	nohup "$BIN" --cluster "$CFILE" --name "$name" --data "$dir" -E "path.repo=$DATA_ROOT/repo" \
		${NODE_ARGS[@]+"${NODE_ARGS[@]}"} \
		>>"$dir/shoal.log" 2>&1 &
	echo $! >"$(pidfile "$name")"
	say "started $name (pid $!) on $(node_url "$name"), log $dir/shoal.log"
}

wait_up() {
	local name=$1 url
	url=$(node_url "$name")
	for _ in $(seq 1 150); do
		if curl -s --max-time 1 "$url/" >/dev/null 2>&1; then return 0; fi
		if ! running_pid "$name" >/dev/null; then
			tail -n 20 "$DATA_ROOT/$name/shoal.log" >&2 || true
			die "$name exited during start (log above)"
		fi
		sleep 0.2
	done
	die "$name did not answer on $url within 30 s"
}

# Fails unless the cluster is green with every node within 30 s.
wait_green() {
	local n want body
	want=$(cluster_nodes | wc -l)
	say "waiting for the cluster to turn green ($want nodes) ..."
	body=$(http "$URL/_cluster/health?wait_for_status=green&wait_for_nodes=$want&timeout=30s") ||
		die "no health answer from $URL"
	n=$(printf '%s' "$body" |
		python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["status"], r["number_of_nodes"])') ||
		die "bad health answer from $URL: ${body:0:300}"
	say "cluster health: $n nodes"
	[ "$n" = "green $want" ] || die "the cluster is not green with $want nodes after 30 s ($n)"
}

build() {
	if [ -n "${SHOAL_BIN:-}" ]; then
		[ -x "$BIN" ] || die "SHOAL_BIN=$SHOAL_BIN holds no executable shoal"
		return 0
	fi
	# Always the incremental build (about a second when nothing changed): a
	# checkout that was pulled or edited never runs a stale binary.
	if [ ! -x "$BIN" ]; then
		say "building Shoal into $BUILD_DIR/ (first run) ..."
		cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	fi
	cmake --build "$BUILD_DIR" -j"$(nproc)" --target shoal >/dev/null ||
		die "build failed: run cmake --build $BUILD_DIR to see why"
}

doc_count() {
	http "$URL/$1/_count" 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin).get("count", ""))' 2>/dev/null || true
}

load_accounts() {
	local total start now batch=250 sent=0 rate resp
	total=$(grep -c . "$SAMPLE")
	if [ "$(doc_count accounts)" = "$total" ]; then
		say "index [accounts] already holds $total documents"
		return 0
	fi
	# (no `| grep -q`: under pipefail its early exit can fail the pipeline)
	if [ "$(curl -s -o /dev/null -w '%{http_code}' -I "$URL/accounts" || true)" = 200 ]; then
		http -X DELETE "$URL/accounts" >/dev/null
	fi
	http -X PUT "$URL/accounts" -H 'Content-Type: application/json' \
		-d "{\"settings\":{\"number_of_shards\":$SHARDS,\"number_of_replicas\":$REPLICAS}}" >/dev/null
	start=$(date +%s%N)
	BODY=$(mktemp)
	trap 'rm -f "$BODY"' EXIT
	# Lines are bare sources: each gets an index action whose id is its line number.
	while [ "$sent" -lt "$total" ]; do
		awk -v from=$((sent + 1)) -v to=$((sent + batch)) \
			'NR >= from && NR <= to { printf "{\"index\":{\"_id\":\"%d\"}}\n%s\n", NR, $0 }' \
			"$SAMPLE" >"$BODY"
		resp=$(http -X POST "$URL/accounts/_bulk" -H 'Content-Type: application/x-ndjson' \
			--data-binary @"$BODY")
		case "$resp" in
		*'"errors":false'*) ;;
		*) die "bulk load failed: $(printf '%s' "$resp" | head -c 400)" ;;
		esac
		sent=$((sent + batch))
		[ "$sent" -gt "$total" ] && sent=$total
		now=$(date +%s%N)
		rate=$(( sent * 1000000000 / ( (now - start) > 0 ? (now - start) : 1 ) ))
		printf '\rloading accounts: %d/%d docs, %d docs/s' "$sent" "$total" "$rate"
	done
	printf '\n'
	http -X POST "$URL/accounts/_refresh" >/dev/null
}

# Runs an example query and prints a short answer.
example() {
	local title=$1 shown=$2
	shift 2
	say ""
	say "# $title"
	say "$shown"
	http "$@" | python3 -c '
import json, sys
r = json.load(sys.stdin)
if "error" in r:
    print("  error:", r["error"].get("type"), "-", r["error"].get("reason")); sys.exit(0)
if "count" in r:
    print("  count:", r["count"]); sys.exit(0)
t = r["hits"]["total"]
print("  hits: %s%s" % (t["value"], "+" if t["relation"] == "gte" else ""))
for h in r["hits"]["hits"][:3]:
    s = h.get("_source", {})
    n = s.get("name", {})
    print("   ", h["_id"], n.get("firstName", ""), n.get("lastName", ""), "age", s.get("age"),
          s.get("employer", ""), "score", h.get("_score"))
for name, a in (r.get("aggregations") or {}).items():
    if "buckets" in a:
        print("  " + name + ":", ", ".join("%s=%s" % (b["key"], b["doc_count"]) for b in a["buckets"]))
    elif "value" in a:
        print("  " + name + ":", a["value"])
'
}


up() {
	while [ $# -gt 0 ]; do
		case "$1" in
		--nodes) NODES=$2; shift 2 ;;
		--shards) SHARDS=$2; shift 2 ;;
		--replicas) REPLICAS=$2; shift 2 ;;
		--no-sample) SAMPLE_ON=0; shift ;;
		*) die "unknown option $1 (up [--nodes N] [--shards S] [--replicas R] [--no-sample])" ;;
		esac
	done
	[ "$NODES" -ge 1 ] 2>/dev/null || die "--nodes wants a number >= 1"
	bash "$ROOT/cluster-scripts/install-deps.sh" || die "missing packages (see above)"
	build
	local running=0 name
	for name in $(cluster_nodes); do
		running_pid "$name" >/dev/null && running=1
	done
	if [ "$running" = 1 ]; then
		say "a cluster is already running (cluster-scripts/local-cluster.sh status); reusing it"
	else
		write_cluster_file
	fi
	for name in $(cluster_nodes); do
		start_node "$name"
	done
	for name in $(cluster_nodes); do
		wait_up "$name"
	done
	wait_green
	if [ "$SAMPLE_ON" = 1 ]; then
		load_accounts
		wait_green
		example "full-text search (the q= query string)" \
			"curl '$URL/accounts/_search?q=michael&pretty'" \
			"$URL/accounts/_search?q=michael"
		example "a bool query with filters: women aged 30 to 35" \
			"curl -H 'Content-Type: application/json' '$URL/accounts/_search?pretty' -d '{\"query\":{\"bool\":{\"filter\":[{\"term\":{\"gender.keyword\":\"female\"}},{\"range\":{\"age\":{\"gte\":30,\"lte\":35}}}]}}}'" \
			-H 'Content-Type: application/json' "$URL/accounts/_search" \
			-d '{"query":{"bool":{"filter":[{"term":{"gender.keyword":"female"}},{"range":{"age":{"gte":30,"lte":35}}}]}}}'
		example "aggregations: favourite fruit and the average balance" \
			"curl -H 'Content-Type: application/json' '$URL/accounts/_search?pretty' -d '{\"size\":0,\"aggs\":{\"fruit\":{\"terms\":{\"field\":\"favoriteFruit.keyword\"}},\"avg_balance\":{\"avg\":{\"field\":\"balance\"}}}}'" \
			-H 'Content-Type: application/json' "$URL/accounts/_search" \
			-d '{"size":0,"aggs":{"fruit":{"terms":{"field":"favoriteFruit.keyword"}},"avg_balance":{"avg":{"field":"balance"}}}}'
	fi
	say ""
	say "the cluster is up; every node answers any request:"
	for name in $(cluster_nodes); do
		say "  $name  $(node_url "$name")    cluster page: $(node_url "$name")/_shoal/ui/"
	done
	say "shards:  curl '$URL/_cat/shards?v'    nodes: curl '$URL/_cat/nodes?v'"
	say "stop it with: cluster-scripts/local-cluster.sh down"
}

stop_node() {
	local name=$1 pid
	if ! pid=$(running_pid "$name"); then
		rm -f "$(pidfile "$name")"
		return 0
	fi
	kill -TERM "$pid"
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || { rm -f "$(pidfile "$name")"; say "stopped $name (pid $pid)"; return 0; }
		sleep 0.2
	done
	say "$name did not stop within 20 s; killing it"
	kill -KILL "$pid" 2>/dev/null || true
	rm -f "$(pidfile "$name")"
}

down() {
	local name any=0
	for name in $(cluster_nodes); do
		running_pid "$name" >/dev/null && any=1
		stop_node "$name"
	done
	[ "$any" = 1 ] || say "not running"
}

status() {
	local name pid up=""
	for name in $(cluster_nodes); do
		if pid=$(running_pid "$name"); then
			say "$name running (pid $pid) on $(node_url "$name")"
			[ -z "$up" ] && up=$(node_url "$name")
		else
			say "$name not running"
		fi
	done
	[ -n "$up" ] || return 1
	http "$up/_cluster/health?pretty" || true
	http "$up/_cat/nodes?v" || true
	http "$up/_cat/shards?v" || true
}

kill_node() {
	local name=${1:-} pid
	[ -n "$name" ] || die "kill wants a node name ($(cluster_nodes | tr '\n' ' '))"
	pid=$(running_pid "$name") || die "$name is not running"
	kill -KILL "$pid"
	rm -f "$(pidfile "$name")"
	say "killed $name (pid $pid) with SIGKILL"
}

restart_node() {
	local name=${1:-} nodes
	[ -n "$name" ] || die "restart wants a node name ($(cluster_nodes | tr '\n' ' '))"
	# The whole list first: `cluster_nodes | grep -qx` failed at random under
	# pipefail (grep -q exits at the first match, python3 dies of SIGPIPE).
	nodes=$(cluster_nodes)
	[[ $'\n'"$nodes"$'\n' == *$'\n'"$name"$'\n'* ]] || die "no node $name in $CFILE"
	build
	stop_node "$name"
	start_node "$name"
	wait_up "$name"
	wait_green
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
up) up "$@" ;;
down) down ;;
status) status ;;
kill) kill_node "$@" ;;
restart) restart_node "$@" ;;
*)
	echo "usage: $0 up [--nodes N] [--shards S] [--replicas R] [--no-sample] | down | status | kill NODE | restart NODE" >&2
	exit 2
	;;
esac
