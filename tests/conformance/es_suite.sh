#!/usr/bin/env bash
# Runs Elasticsearch's own YAML REST tests (7.10.2, the version Shoal
# reports) against a solo node started from a build, and prints the table:
# files, tests, passed, failed, skipped, pass % (of the tests run, skips
# left out) and the failures grouped by cause. Not part of the default test
# run. The tests come from Elasticsearch's Apache-2.0 rest-api-spec jar on
# Maven Central, cached outside the repository; nothing of it is copied here.
#
#   tests/conformance/es_suite.sh [BUILD_DIR] [FOLDER...]
#     BUILD_DIR  default build (its bin/shoal is started)
#     FOLDER     test folders of the jar (default: the APIs Shoal serves)
#   ES_SUITE_PORT=19400 ES_SUITE_JSON=out.json ES_SUITE_FILTER=REGEX
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION=7.10.2
JAR_URL=https://repo1.maven.org/maven2/org/elasticsearch/rest-api-spec/$VERSION/rest-api-spec-$VERSION.jar
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/shoal/rest-api-spec-$VERSION
BUILD=${1:-build}
[ $# -gt 0 ] && shift
PORT=${ES_SUITE_PORT:-19400}

DEFAULT_FOLDERS="index get create delete update bulk mget exists get_source count
search search.aggregation search.highlight search.inner_hits scroll explain field_caps
msearch suggest info ping
indices.create indices.delete indices.get indices.exists indices.get_mapping
indices.put_mapping indices.get_settings indices.put_settings indices.refresh
indices.flush indices.forcemerge indices.stats indices.put_alias indices.get_alias
indices.delete_alias indices.exists_alias indices.update_aliases indices.put_template
indices.get_template indices.exists_template indices.open indices.analyze
indices.validate_query
cat.aliases cat.count cat.health cat.indices cat.nodes cat.shards cat.templates
cat.segments cat.recovery cat.templates cat.snapshots cat.allocation
cluster.health"

if [ ! -d "$CACHE/rest-api-spec/test" ]; then
	mkdir -p "$CACHE"
	curl -fsSL -o "$CACHE/rest-api-spec.jar.part" "$JAR_URL"
	mv "$CACHE/rest-api-spec.jar.part" "$CACHE/rest-api-spec.jar"
	(cd "$CACHE" && python3 -m zipfile -e rest-api-spec.jar . >/dev/null)
fi
T=$CACHE/rest-api-spec/test

folders=()
for f in ${*:-$DEFAULT_FOLDERS}; do
	if [ -d "$T/$f" ]; then folders+=("$T/$f"); else echo "no folder $f in the jar" >&2; fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/shoal-es-suite.XXXXXX")
NODE_PID=
cleanup() {
	[ -n "$NODE_PID" ] && kill "$NODE_PID" 2>/dev/null && wait "$NODE_PID" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/repo"
# the suite must meet the node started here, not whatever holds the port
if curl -fs "http://127.0.0.1:$PORT/" >/dev/null 2>&1; then
	echo "es_suite: port $PORT is taken by another server; set ES_SUITE_PORT" >&2
	exit 1
fi
"$BUILD/bin/shoal" --solo --data "$WORK/data" --http "127.0.0.1:$PORT" \
	-E "path.repo=$WORK/repo" >"$WORK/node.log" 2>&1 &
NODE_PID=$!
for _ in $(seq 100); do
	curl -fs "http://127.0.0.1:$PORT/" >/dev/null 2>&1 && break
	sleep 0.1
done
if ! kill -0 "$NODE_PID" 2>/dev/null || ! curl -fs "http://127.0.0.1:$PORT/" >/dev/null; then
	cat "$WORK/node.log" >&2
	exit 1
fi

JSON=${ES_SUITE_JSON:-$WORK/results.json}
args=(--url "http://127.0.0.1:$PORT" --report --json "$JSON")
[ -n "${ES_SUITE_FILTER:-}" ] && args+=(--filter "$ES_SUITE_FILTER")
python3 tests/conformance/run.py "${args[@]}" "${folders[@]}" >"$WORK/run.log"
python3 tests/conformance/run.py --table "$JSON"
