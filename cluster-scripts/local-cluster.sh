#!/usr/bin/env bash
# A local Shoal cluster on 127.0.0.1 with the sample accounts loaded; its
# membership, master election and cluster state run on etcd.
#   cluster-scripts/local-cluster.sh up [--nodes N] [--etcd 1|3] [--shards S] [--replicas R] [--no-sample]
#       install what is missing, build (incrementally), start 1 or 3 etcd
#       members (default 1) and N nodes (default 2) detached, wait for green,
#       load 1,000 accounts (S shards, R replicas; default 2 and 1), show
#       example queries
#   cluster-scripts/local-cluster.sh down          stop every node and etcd
#   cluster-scripts/local-cluster.sh status        which nodes run, health, shards
#   cluster-scripts/local-cluster.sh add           start one more node; copies move to it
#   cluster-scripts/local-cluster.sh drain NODE    move every copy off NODE (exclude._name)
#   cluster-scripts/local-cluster.sh remove NODE   drain NODE, then stop it and forget it
#   cluster-scripts/local-cluster.sh kill NODE     kill -9 one node (node-2, ...)
#   cluster-scripts/local-cluster.sh restart NODE  start it again (after kill)
#   cluster-scripts/local-cluster.sh etcd-kill K   kill -9 etcd member K (1..3)
#   cluster-scripts/local-cluster.sh etcd-restart K  start it again
# Node i listens on HTTP 9200+i-1 and transport 9300+i-1; etcd member k on
# 2379+2(k-1) (peer one higher); data, pid and log of each live in
# ./data/node-i and ./data/etcd-k, the cluster file is ./data/cluster.json.
# Environment: SHOAL_BASE_PORT (default 9200; transport ports are 100 higher),
# SHOAL_ETCD_PORT (default 2379),
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
EBASE=${SHOAL_ETCD_PORT:-2379}
ETCD_MEMBERS=1
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

# The cluster file: the etcd endpoints and the nodes this script started
# (each node reads only its own entry; it finds the others in etcd).
write_cluster_file() {
	mkdir -p "$DATA_ROOT"
	python3 - "$CFILE" "$NODES" "$BASE" "$TBASE" "$EBASE" "$ETCD_MEMBERS" <<'PY'
import json, secrets, sys
path, n, base, tbase, ebase, em = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
spec = {"cluster_name": "shoal-local", "secret": secrets.token_hex(16),
        "etcd": ["127.0.0.1:%d" % (ebase + 2 * k) for k in range(em)],
        "nodes": [{"name": "node-%d" % (i + 1), "http": "127.0.0.1:%d" % (base + i),
                   "transport": "127.0.0.1:%d" % (tbase + i)} for i in range(n)]}
with open(path, "w") as f:
    json.dump(spec, f, indent=1)
PY
}

# Appends node-(N+1) to the cluster file; prints its name.
add_to_cluster_file() {
	python3 - "$CFILE" "$BASE" "$TBASE" <<'PY'
import json, sys
path, base, tbase = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = json.load(open(path))
used = {int(n["name"].split("-")[1]) for n in spec["nodes"]}
i = 1
while i in used:
    i += 1
spec["nodes"].append({"name": "node-%d" % i, "http": "127.0.0.1:%d" % (base + i - 1),
                      "transport": "127.0.0.1:%d" % (tbase + i - 1)})
json.dump(spec, open(path + ".tmp", "w"), indent=1)
print("node-%d" % i)
PY
	mv "$CFILE.tmp" "$CFILE"
}

remove_from_cluster_file() {
	python3 - "$CFILE" "$1" <<'PY'
import json, sys
path, name = sys.argv[1], sys.argv[2]
spec = json.load(open(path))
spec["nodes"] = [n for n in spec["nodes"] if n["name"] != name]
json.dump(spec, open(path + ".tmp", "w"), indent=1)
PY
	mv "$CFILE.tmp" "$CFILE"
}

etcd_members() {
	[ -f "$CFILE" ] || return 0
	python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1])).get("etcd", [])))' "$CFILE"
}

etcd_start() {
	local k=$1 n dir="$DATA_ROOT/etcd-$1" pid cluster="" i port
	n=$(etcd_members)
	mkdir -p "$dir"
	if pid=$(running_pid "etcd-$k"); then
		say "etcd-$k already running (pid $pid)"
		return 0
	fi
	for i in $(seq 1 "$n"); do
		cluster="$cluster${cluster:+,}etcd-$i=http://127.0.0.1:$((EBASE + 2 * (i - 1) + 1))"
	done
	port=$((EBASE + 2 * (k - 1)))
	command -v etcd >/dev/null || die "etcd is not installed (apt-get install etcd-server)"
	nohup etcd --name "etcd-$k" --data-dir "$dir/data" \
		--listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
		--listen-peer-urls "http://127.0.0.1:$((port + 1))" \
		--initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
		--initial-cluster "$cluster" --initial-cluster-token shoal-local \
		--auto-compaction-mode revision --auto-compaction-retention 1000 \
		--quota-backend-bytes $((256 * 1024 * 1024)) \
		--logger zap --log-outputs stderr --log-level warn >>"$dir/etcd.log" 2>&1 &
	echo $! >"$(pidfile "etcd-$k")"
	say "started etcd-$k (pid $!) on 127.0.0.1:$port, log $dir/etcd.log"
}

etcd_wait() {
	local k=$1 port=$((EBASE + 2 * ($1 - 1)))
	for _ in $(seq 1 150); do
		if curl -s --max-time 1 -X POST "http://127.0.0.1:$port/v3/kv/range" -d '{"key":"AA=="}' \
			>/dev/null 2>&1; then return 0; fi
		running_pid "etcd-$k" >/dev/null || { tail -n 20 "$DATA_ROOT/etcd-$k/etcd.log" >&2 || true; die "etcd-$k exited (log above)"; }
		sleep 0.2
	done
	die "etcd-$k did not answer on 127.0.0.1:$port within 30 s"
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
		--etcd) ETCD_MEMBERS=$2; shift 2 ;;
		--shards) SHARDS=$2; shift 2 ;;
		--replicas) REPLICAS=$2; shift 2 ;;
		--no-sample) SAMPLE_ON=0; shift ;;
		*) die "unknown option $1 (up [--nodes N] [--etcd 1|3] [--shards S] [--replicas R] [--no-sample])" ;;
		esac
	done
	[ "$NODES" -ge 1 ] 2>/dev/null || die "--nodes wants a number >= 1"
	[ "$ETCD_MEMBERS" = 1 ] || [ "$ETCD_MEMBERS" = 3 ] || die "--etcd wants 1 or 3"
	bash "$ROOT/cluster-scripts/install-deps.sh" || die "missing packages (see above)"
	build
	local running=0 name
	for name in $(cluster_nodes); do
		running_pid "$name" >/dev/null && running=1
	done
	if [ "$running" = 1 ]; then
		say "a cluster is already running (cluster-scripts/local-cluster.sh status); reusing it"
	else
		# a fresh cluster: etcd starts empty too
		local k
		for k in 1 2 3; do rm -rf "$DATA_ROOT/etcd-$k"; done
		write_cluster_file
	fi
	local k
	for k in $(seq 1 "$(etcd_members)"); do
		etcd_start "$k"
	done
	for k in $(seq 1 "$(etcd_members)"); do
		etcd_wait "$k"
	done
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
	local name any=0 k
	for name in $(cluster_nodes); do
		running_pid "$name" >/dev/null && any=1
		stop_node "$name"
	done
	for k in 1 2 3; do
		running_pid "etcd-$k" >/dev/null && any=1
		stop_node "etcd-$k"
	done
	[ "$any" = 1 ] || say "not running"
}

# The first node of the file that answers.
any_url() {
	local name
	for name in $(cluster_nodes); do
		if running_pid "$name" >/dev/null; then node_url "$name"; return 0; fi
	done
	die "no node is running"
}

# Copies on NODE per _cat/shards (every state: a relocating one counts).
copies_on() {
	http "$1/_cat/shards" | awk -v n="$2" '$NF == n || $(NF-1) == n { c++ } END { print c + 0 }'
}

# Sets cluster.routing.allocation.exclude._name to the given list ("" clears).
set_exclude() {
	local v
	if [ -n "$2" ]; then v="\"$2\""; else v=null; fi
	http -X PUT "$1/_cluster/settings" -H 'Content-Type: application/json' \
		-d "{\"persistent\":{\"cluster.routing.allocation.exclude._name\":$v}}" >/dev/null ||
		die "cannot set the allocation exclude list"
}

excluded_now() {
	http "$1/_cluster/settings?flat_settings=true" | python3 -c 'import json,sys
print(json.load(sys.stdin).get("persistent", {}).get("cluster.routing.allocation.exclude._name", ""))'
}

add_node() {
	build
	local name url
	name=$(add_to_cluster_file)
	start_node "$name"
	wait_up "$name"
	url=$(any_url)
	say "$name joined; copies move to it while searches and writes go on (curl '$url/_cat/recovery?v')"
	wait_green
	http "$url/_cat/allocation?v" 2>/dev/null || http "$url/_cat/shards?v"
}

drain_node() {
	local name=${1:-} url list n
	[ -n "$name" ] || die "drain wants a node name ($(cluster_nodes | tr '\n' ' '))"
	url=$(any_url)
	list=$(excluded_now "$url")
	case ",$list," in *",$name,"*) ;; *) list="$list${list:+,}$name" ;; esac
	set_exclude "$url" "$list"
	say "draining $name (cluster.routing.allocation.exclude._name=$list) ..."
	for _ in $(seq 1 600); do
		n=$(copies_on "$url" "$name")
		[ "$n" = 0 ] && { say "$name holds no copies"; wait_green; return 0; }
		sleep 0.5
	done
	die "$name still holds $n copies after 5 minutes"
}

remove_node() {
	local name=${1:-} url list
	[ -n "$name" ] || die "remove wants a node name ($(cluster_nodes | tr '\n' ' '))"
	drain_node "$name"
	stop_node "$name"
	remove_from_cluster_file "$name"
	url=$(any_url)
	list=$(excluded_now "$url" | tr ',' '\n' | grep -vx "$name" | paste -sd, - || true)
	set_exclude "$url" "$list"
	say "removed $name"
	wait_green
}

etcd_kill() {
	local k=${1:-} pid
	[ -n "$k" ] || die "etcd-kill wants a member number (1..$(etcd_members))"
	pid=$(running_pid "etcd-$k") || die "etcd-$k is not running"
	kill -KILL "$pid"
	rm -f "$(pidfile "etcd-$k")"
	say "killed etcd-$k (pid $pid) with SIGKILL"
}

etcd_restart() {
	local k=${1:-}
	[ -n "$k" ] && [ "$k" -ge 1 ] && [ "$k" -le "$(etcd_members)" ] ||
		die "etcd-restart wants a member number (1..$(etcd_members))"
	etcd_start "$k"
	etcd_wait "$k"
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
add) add_node ;;
drain) drain_node "$@" ;;
remove) remove_node "$@" ;;
etcd-kill) etcd_kill "$@" ;;
etcd-restart) etcd_restart "$@" ;;
*)
	echo "usage: $0 up [--nodes N] [--etcd 1|3] [--shards S] [--replicas R] [--no-sample] | down | status | add | drain NODE | remove NODE | kill NODE | restart NODE | etcd-kill K | etcd-restart K" >&2
	exit 2
	;;
esac
