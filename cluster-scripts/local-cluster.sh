#!/usr/bin/env bash
# A local Shoal node on 127.0.0.1:9200 with the sample accounts loaded.
#   cluster-scripts/local-cluster.sh up       install what is missing, build on first run,
#                                             start, load 1,000 accounts, show example queries
#   cluster-scripts/local-cluster.sh down     stop it
#   cluster-scripts/local-cluster.sh status   is it running, and what does it hold
# Data, pid and log live in ./data/node-1 (relative to the repository root).
# Environment: SHOAL_HTTP (default 127.0.0.1:9200), SHOAL_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
HTTP=${SHOAL_HTTP:-127.0.0.1:9200}
BUILD_DIR=${SHOAL_BUILD_DIR:-build}
BIN="$ROOT/$BUILD_DIR/bin/shoal"
DATA="$ROOT/data/node-1"
PIDFILE="$DATA/shoal.pid"
LOG="$DATA/shoal.log"
SAMPLE="$ROOT/cluster-scripts/sample/accounts-es.ndjson"
URL="http://$HTTP"

say() { printf '%s\n' "$*"; }
die() { printf 'local-cluster: %s\n' "$*" >&2; exit 1; }

running_pid() {
	[ -f "$PIDFILE" ] || return 1
	local pid
	pid=$(cat "$PIDFILE" 2>/dev/null || true)
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && { echo "$pid"; return 0; }
	return 1
}

# curl with a bounded wait; prints the body.
http() { curl -sS --max-time 60 "$@"; }

wait_up() {
	for _ in $(seq 1 150); do
		if curl -s --max-time 1 "$URL/" >/dev/null 2>&1; then return 0; fi
		if ! running_pid >/dev/null; then
			tail -n 20 "$LOG" >&2 || true
			die "the node exited during start (log above, full log: $LOG)"
		fi
		sleep 0.2
	done
	die "the node did not answer on $URL within 30 s (log: $LOG)"
}

build() {
	if [ ! -x "$BIN" ]; then
		say "building Shoal into $BUILD_DIR/ (first run) ..."
		cmake -S "$ROOT" -B "$ROOT/$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
		cmake --build "$ROOT/$BUILD_DIR" -j"$(nproc)" --target shoal >/dev/null ||
			die "build failed: run cmake --build $BUILD_DIR to see why"
	fi
}

doc_count() {
	http "$URL/_cat/count/$1?h=count" 2>/dev/null | tr -d ' \n' || true
}

load_accounts() {
	local total start now batch=250 sent=0 rate resp
	total=$(grep -c . "$SAMPLE")
	if [ "$(doc_count accounts)" = "$total" ]; then
		say "index [accounts] already holds $total documents"
		return 0
	fi
	if curl -s -o /dev/null -w '%{http_code}' -I "$URL/accounts" | grep -q 200; then
		http -X DELETE "$URL/accounts" >/dev/null
	fi
	http -X PUT "$URL/accounts" -H 'Content-Type: application/json' \
		-d '{"settings":{"number_of_shards":1,"number_of_replicas":0}}' >/dev/null
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
	mkdir -p "$DATA"
	bash "$ROOT/cluster-scripts/install-deps.sh" || die "missing packages (see above)"
	build
	if pid=$(running_pid); then
		say "node already running (pid $pid) on $URL"
	else
		say "starting node-1 on $URL (data $DATA, log $LOG)"
		nohup "$BIN" --solo --data "$DATA" --http "$HTTP" --name node-1 >>"$LOG" 2>&1 &
		echo $! >"$PIDFILE"
		wait_up
	fi
	load_accounts
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
	say ""
	say "node-1 is up on $URL; stop it with: cluster-scripts/local-cluster.sh down"
}

down() {
	local pid
	if ! pid=$(running_pid); then
		say "not running"
		rm -f "$PIDFILE"
		return 0
	fi
	kill -TERM "$pid"
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; say "stopped node-1 (pid $pid)"; return 0; }
		sleep 0.2
	done
	say "node-1 did not stop within 20 s; killing it"
	kill -KILL "$pid" 2>/dev/null || true
	rm -f "$PIDFILE"
}

status() {
	local pid
	if pid=$(running_pid); then
		say "node-1 running (pid $pid) on $URL, data $DATA"
		http "$URL/_cluster/health?pretty" || true
		http "$URL/_cat/indices?v" || true
	else
		say "node-1 not running"
		return 1
	fi
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
*)
	echo "usage: $0 up|down|status" >&2
	exit 2
	;;
esac
